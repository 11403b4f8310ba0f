//! The `--plot` charts as a person reads them: each kind rendered to PNG
//! (target/tmp/charts/, to be looked at: docs/testing.md), and checked the
//! way a reader would look: no label over another, none off the canvas,
//! whole-number ticks where the unit is whole, a unit on both axes.
//!
//! The checks read the SVG's text elements (position, anchor, font size,
//! rotation) with widths estimated per character on the wide side of
//! DejaVu Sans; they need no fonts. The PNGs are drawn with the system's
//! fonts when there are any (Debian: fonts-dejavu-core), for eyes only.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use lifeboat_command::plot::{self, Mark, MinutePoint, Series};

/// A text element's box on the canvas, in pixels.
#[derive(Debug, Clone)]
struct Label {
    text: String,
    anchor: String,
    rotated: bool,
    left: f64,
    top: f64,
    right: f64,
    bottom: f64,
}

/// Advance widths in em, rounded up from DejaVu Sans: wider than the
/// sans-serif fonts browsers pick, so a layout that passes here holds
/// there.
fn em(c: char) -> f64 {
    match c {
        'i' | 'j' | 'l' | '.' | ',' | ':' | ';' | '\'' | '|' | '!' => 0.30,
        ' ' | '(' | ')' | '[' | ']' | 'f' | 't' | 'r' | '-' | '/' => 0.42,
        'm' | 'w' | 'M' | 'W' | '%' | '@' => 1.0,
        'A'..='Z' => 0.78,
        _ => 0.66,
    }
}

fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=\"");
    let start = tag.find(&key)? + key.len();
    let len = tag[start..].find('"')?;
    Some(&tag[start..start + len])
}

fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// The canvas's size and every text element's box.
fn labels(svg: &str) -> ((f64, f64), Vec<Label>) {
    let head = &svg[..svg.find('>').expect("an <svg> tag")];
    let size = (
        attr(head, "width").unwrap().parse().unwrap(),
        attr(head, "height").unwrap().parse().unwrap(),
    );
    let mut found = Vec::new();
    let mut rest = svg;
    while let Some(at) = rest.find("<text ") {
        rest = &rest[at..];
        let tag_end = rest.find('>').unwrap();
        let tag = &rest[..tag_end];
        let close = rest.find("</text>").unwrap();
        let text = unescape(rest[tag_end + 1..close].trim());
        rest = &rest[close..];

        let num = |name: &str| attr(tag, name).map_or(0.0, |v| v.parse::<f64>().unwrap());
        let (x, y, size) = (num("x"), num("y"), num("font-size"));
        assert!(size > 0.0, "no font-size on {tag}");
        let width: f64 = text.chars().map(em).sum::<f64>() * size;
        let anchor = attr(tag, "text-anchor").unwrap_or("start").to_owned();
        let left = match anchor.as_str() {
            "middle" => x - width / 2.0,
            "end" => x - width,
            _ => x,
        };
        let dy = match attr(tag, "dy") {
            None => 0.0,
            Some(d) if d.ends_with("em") => d.trim_end_matches("em").parse::<f64>().unwrap() * size,
            Some(d) if d.ends_with("ex") => {
                d.trim_end_matches("ex").parse::<f64>().unwrap() * 0.55 * size
            }
            Some(d) => d.parse().unwrap(),
        };
        let baseline = y + dy;
        let corners = [
            (left, baseline - 0.80 * size),
            (left + width, baseline - 0.80 * size),
            (left, baseline + 0.24 * size),
            (left + width, baseline + 0.24 * size),
        ];
        let transform = attr(tag, "transform");
        let corners = match transform {
            None => corners.to_vec(),
            Some(t) => {
                let args: Vec<f64> = t
                    .trim_start_matches("rotate(")
                    .trim_end_matches(')')
                    .split(',')
                    .map(|a| a.trim().parse().unwrap())
                    .collect();
                assert!(t.starts_with("rotate(") && args.len() == 3, "{t}");
                let (sin, cos) = args[0].to_radians().sin_cos();
                let (cx, cy) = (args[1], args[2]);
                corners
                    .iter()
                    .map(|&(px, py)| {
                        (
                            cx + (px - cx) * cos - (py - cy) * sin,
                            cy + (px - cx) * sin + (py - cy) * cos,
                        )
                    })
                    .collect()
            }
        };
        let xs = corners.iter().map(|c| c.0);
        let ys = corners.iter().map(|c| c.1);
        found.push(Label {
            text,
            anchor,
            rotated: transform.is_some(),
            left: xs.clone().fold(f64::INFINITY, f64::min),
            right: xs.fold(f64::NEG_INFINITY, f64::max),
            top: ys.clone().fold(f64::INFINITY, f64::min),
            bottom: ys.fold(f64::NEG_INFINITY, f64::max),
        });
    }
    (size, found)
}

/// Which axes count whole units (milliseconds, minutes, counts).
struct Whole {
    x: bool,
    y: bool,
}

/// What a reader would object to in the chart, one line each.
fn problems(svg: &str, whole: &Whole) -> Vec<String> {
    let ((width, height), labels) = labels(svg);
    let mut found = Vec::new();
    for (i, a) in labels.iter().enumerate() {
        if a.left < 0.0 || a.top < 0.0 || a.right > width || a.bottom > height {
            found.push(format!(
                "{:?} runs off the {width}x{height} canvas ({:.0}..{:.0}, {:.0}..{:.0})",
                a.text, a.left, a.right, a.top, a.bottom
            ));
        }
        for b in &labels[i + 1..] {
            let overlap_x = a.right.min(b.right) - a.left.max(b.left);
            let overlap_y = a.bottom.min(b.bottom) - a.top.max(b.top);
            if overlap_x > 0.0 && overlap_y > 0.0 {
                found.push(format!(
                    "{:?} and {:?} are drawn over each other",
                    a.text, b.text
                ));
            }
        }
    }
    let numeric = |l: &&Label| !l.rotated && l.text.parse::<f64>().is_ok();
    // plotters centres the x axis's tick labels and right-aligns the y
    // axis's.
    let x_ticks: Vec<&Label> = labels
        .iter()
        .filter(numeric)
        .filter(|l| l.anchor == "middle")
        .collect();
    let y_ticks: Vec<&Label> = labels
        .iter()
        .filter(numeric)
        .filter(|l| l.anchor == "end")
        .collect();
    for (axis, ticks, whole) in [("x", &x_ticks, whole.x), ("y", &y_ticks, whole.y)] {
        if ticks.len() < 2 {
            found.push(format!("the {axis} axis has {} tick labels", ticks.len()));
        }
        for t in ticks.iter().filter(|_| whole) {
            if t.text.parse::<i64>().is_err() {
                found.push(format!("{axis} tick {:?} is not a whole number", t.text));
            }
        }
    }
    // The y axis's description is the rotated text; the x axis's the
    // lowest centred words.
    let y_desc = labels.iter().find(|l| l.rotated);
    let x_desc = labels
        .iter()
        .filter(|l| !l.rotated && l.anchor == "middle" && l.text.parse::<f64>().is_err())
        .max_by(|a, b| a.top.total_cmp(&b.top));
    for (axis, desc) in [("x", x_desc), ("y", y_desc)] {
        match desc {
            Some(d) if d.text.contains('(') && d.text.ends_with(')') => {}
            Some(d) => found.push(format!(
                "the {axis} axis's description {:?} names no unit in brackets",
                d.text
            )),
            None => found.push(format!("the {axis} axis has no description")),
        }
    }
    found
}

/// Where the PNGs go: target/tmp/charts.
fn out_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("charts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `svg` as PNG beside it, at twice its size, with the system's fonts
/// (none: the text is left out of the picture, not out of the checks).
fn render_png(svg: &Path) -> PathBuf {
    let mut options = resvg::usvg::Options::default();
    let fonts = options.fontdb_mut();
    fonts.load_system_fonts();
    if fonts
        .faces()
        .any(|f| f.families.iter().any(|(name, _)| name == "DejaVu Sans"))
    {
        fonts.set_sans_serif_family("DejaVu Sans");
    }
    let text = std::fs::read_to_string(svg).unwrap();
    let tree = resvg::usvg::Tree::from_str(&text, &options).unwrap();
    let size = tree.size().to_int_size();
    let mut pixmap =
        resvg::tiny_skia::Pixmap::new(size.width() * 2, size.height() * 2).expect("a canvas");
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::from_scale(2.0, 2.0),
        &mut pixmap.as_mut(),
    );
    let png = svg.with_extension("png");
    pixmap.save_png(&png).unwrap();
    png
}

/// Renders `svg` to PNG and returns what is wrong with it, named.
fn look_at(svg: &Path, whole: &Whole) -> Vec<String> {
    let png = render_png(svg);
    let text = std::fs::read_to_string(svg).unwrap();
    eprintln!("{}", png.display());
    problems(&text, whole)
        .into_iter()
        .map(|p| format!("{}: {p}", svg.display()))
        .collect()
}

const DURATIONS: Whole = Whole { x: true, y: false };
const MINUTES: Whole = Whole { x: true, y: true };

fn lifeboat(args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_lifeboat"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "lifeboat {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A demo-like day: 120 minutes, an outage from minute 40 to 70.
fn day(minutes: u32, steps: f64) -> Vec<MinutePoint> {
    (0..minutes)
        .map(|m| {
            let out = (40..70).contains(&m);
            MinutePoint {
                minute: f64::from(m),
                steps: if out { steps * 0.6 } else { steps },
                started: steps / 12.0,
                payments: if out { steps / 40.0 } else { steps / 15.0 },
                breaker_open: out,
            }
        })
        .collect()
}

/// Every kind of chart, drawn fresh: the commands' own (advise-timeouts on
/// its synthetic data, as in the docs, and replay on those calls) and
/// plot.rs's with data
/// that crowds them (marks on top of each other and at both edges, long
/// names, a few minutes of a few carts).
#[test]
fn every_chart_reads_cleanly() {
    let dir = out_dir();
    let mut found = Vec::new();

    let advise = dir.join("advise.svg");
    let calls = dir.join("calls.csv");
    lifeboat(&[
        "advise-timeouts",
        "--synthetic",
        "--export",
        calls.to_str().unwrap(),
        "--plot",
        advise.to_str().unwrap(),
    ]);
    found.extend(look_at(&advise, &DURATIONS));

    // The same calls replayed (`replay --synthetic` models four weeks: too
    // long for a test build; its chart is drawn the same way).
    let replay = dir.join("replay.svg");
    lifeboat(&[
        "replay",
        "--input",
        calls.to_str().unwrap(),
        "--plot",
        replay.to_str().unwrap(),
    ]);
    found.extend(look_at(&replay, &DURATIONS));

    let a: Vec<f64> = (0..2000)
        .map(|i| 200.0 + f64::from(i % 97) * 30.0)
        .collect();
    let b: Vec<f64> = (0..2000)
        .map(|i| 900.0 + f64::from(i % 89) * 45.0)
        .collect();
    let c: Vec<f64> = (0..2000)
        .map(|i| 1500.0 + f64::from(i % 13) * 9.0)
        .collect();
    let series = [
        Series {
            name: "operator-with-a-long-name search",
            values: &a,
        },
        Series {
            name: "operator-with-a-long-name price",
            values: &b,
        },
        Series {
            name: "nordic search",
            values: &c,
        },
    ];
    let mut marks = Vec::new();
    for s in &series {
        for (what, x) in [
            ("cluster 1", 0.0),
            ("cluster 2", 1320.0),
            ("cluster 3", 1350.0),
            ("budget", 3050.0),
            ("old budget", 9000.0),
        ] {
            marks.push(Mark {
                label: format!("{}: {what} ({x:.0} ms)", s.name),
                x,
            });
        }
    }
    let crowded = dir.join("crowded.svg");
    plot::distributions(
        &crowded,
        "many marks, some past the end",
        &series,
        &marks,
        8000.0,
        100.0,
    )
    .unwrap();
    found.extend(look_at(&crowded, &DURATIONS));

    let few = dir.join("few-ms.svg");
    plot::distributions(
        &few,
        "a few milliseconds",
        &series[2..],
        &[Mark {
            label: "budget 3 ms".into(),
            x: 3.0,
        }],
        7.0,
        0.5,
    )
    .unwrap();
    found.extend(look_at(&few, &DURATIONS));

    let carts = dir.join("carts.svg");
    plot::carts_minutes(
        &carts,
        "carts minute by minute against the breaker",
        &day(120, 360.0),
    )
    .unwrap();
    found.extend(look_at(&carts, &MINUTES));

    let short = dir.join("carts-short.svg");
    plot::carts_minutes(&short, "three minutes of two carts", &day(3, 2.0)).unwrap();
    found.extend(look_at(&short, &MINUTES));

    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// The charts in docs/ (docs/timeouts.md, docs/replay.md, docs/carts.md
/// name the commands that drew them) as they are committed.
#[test]
fn the_docs_charts_read_cleanly() {
    let dir = out_dir();
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
    let mut found = Vec::new();
    for (name, whole) in [
        ("advise.svg", DURATIONS),
        ("replay.svg", DURATIONS),
        ("demo-day.svg", MINUTES),
    ] {
        let copy = dir.join(format!("docs-{name}"));
        std::fs::copy(docs.join(name), &copy).unwrap();
        found.extend(look_at(&copy, &whole));
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// The check sees what a reader would: two labels at one place, a label
/// past the edge, `5.0` on a whole axis, an axis with no unit.
#[test]
fn the_checks_see_a_bad_chart() {
    let bad = r#"<svg width="200" height="100" viewBox="0 0 200 100" xmlns="http://www.w3.org/2000/svg">
<text x="100" y="5" dy="0.76em" text-anchor="middle" font-family="sans-serif" font-size="12">
a title
</text>
<text x="50" y="40" dy="0.76em" text-anchor="start" font-family="sans-serif" font-size="12">
first label
</text>
<text x="60" y="42" dy="0.76em" text-anchor="start" font-family="sans-serif" font-size="12">
second label
</text>
<text x="190" y="60" dy="0.76em" text-anchor="start" font-family="sans-serif" font-size="12">
off the edge
</text>
<text x="30" y="80" dy="0.76em" text-anchor="middle" font-family="sans-serif" font-size="9">
0.0
</text>
<text x="90" y="80" dy="0.76em" text-anchor="middle" font-family="sans-serif" font-size="9">
5.0
</text>
<text x="20" y="20" dy="0.5ex" text-anchor="end" font-family="sans-serif" font-size="9">
10
</text>
<text x="20" y="60" dy="0.5ex" text-anchor="end" font-family="sans-serif" font-size="9">
0
</text>
<text x="100" y="88" dy="-0.5ex" text-anchor="middle" font-family="sans-serif" font-size="9">
minute
</text>
<text x="6" y="50" dy="0.76em" text-anchor="middle" font-family="sans-serif" font-size="9" transform="rotate(270, 6, 50)">
count (per minute)
</text>
</svg>"#;
    let found = problems(bad, &MINUTES);
    let has = |what: &str| found.iter().any(|p| p.contains(what));
    assert!(
        has("\"first label\" and \"second label\" are drawn over each other"),
        "{found:#?}"
    );
    assert!(has("\"off the edge\" runs off"), "{found:#?}");
    assert!(has("x tick \"5.0\" is not a whole number"), "{found:#?}");
    assert!(
        has("x axis's description \"minute\" names no unit"),
        "{found:#?}"
    );
    assert!(!has("y axis"), "{found:#?}");
}
