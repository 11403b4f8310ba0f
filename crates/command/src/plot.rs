//! SVG charts for `--plot FILE`: duration distributions with their budgets
//! marked (advise-timeouts, replay) and carts minute by minute against the
//! breaker (carts, demo). Drawn with `plotters`' SVG backend: no browser, no
//! fonts installed.
//!
//! Nothing is drawn over anything else: the marks' labels sit in rows above
//! the plot, each row's labels apart and clear of the lines running up to
//! the rows above; the legend is a row under the x axis. Text widths are
//! estimated (no fonts to measure with) on the wide side of DejaVu Sans,
//! so the layout holds in the fonts a browser picks for `sans-serif`.
//! crates/cli/tests/charts.rs renders the charts to PNG and checks the
//! labels' boxes.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// One distribution: a name for the legend and its values (milliseconds).
pub struct Series<'a> {
    pub name: &'a str,
    pub values: &'a [f64],
}

/// A vertical line at `x` ms, labelled. A label starting with a series'
/// name and a colon (`nordic search: budget 3050 ms`) is drawn in that
/// series' colour.
pub struct Mark {
    pub label: String,
    pub x: f64,
}

const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
];

fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// Canvas width; the heights follow from the rows of labels and legend.
const WIDTH: u32 = 900;
/// Around the canvas; the right one leaves room for the last x tick's
/// label, centred on the plot's right edge.
const MARGIN: u32 = 12;
const MARGIN_RIGHT: u32 = 28;
/// The plot's own height, whatever is around it.
const PLOT_HEIGHT: u32 = 340;
/// Tick labels and the axis description under the plot, and left of it.
const X_LABEL_AREA: u32 = 50;
const Y_LABEL_AREA: u32 = 70;
/// Font sizes as plotters takes them (it writes 1/1.24 of them as the
/// SVG's font-size, in pixels).
const TITLE_FONT: f64 = 22.0;
const TICK_FONT: f64 = 15.0;
const DESC_FONT: f64 = 16.0;
const LABEL_FONT: f64 = 15.0;
/// The title's row: its text and the gap under it.
const TITLE_ROW: u32 = 36;
/// One row of marks' labels or of the legend.
const ROW: u32 = 18;
/// Between two labels in one row, and a label and its line.
const GAP: i32 = 10;
const TO_LINE: i32 = 4;
/// A line this near a label's end passes it (it is less than `TO_LINE`, so
/// that marks at one place can have their labels either side).
const CLEAR: i32 = 1;

/// The width, in pixels, of `text` drawn at plotters' font size `size`:
/// per-character advances of DejaVu Sans (the widest common sans-serif),
/// rounded up.
fn text_width(text: &str, size: f64) -> f64 {
    let em: f64 = text
        .chars()
        .map(|c| match c {
            'i' | 'j' | 'l' | '.' | ',' | ':' | ';' | '\'' | '|' | '!' => 0.30,
            ' ' | '(' | ')' | '[' | ']' | 'f' | 't' | 'r' | '-' | '/' => 0.42,
            'm' | 'w' | 'M' | 'W' | '%' | '@' => 1.0,
            'A'..='Z' => 0.78,
            _ => 0.66,
        })
        .sum();
    em * size / 1.24
}

/// A tick label: the value with no more decimals than it has (`5`,
/// `1000`, `2.5`), so that whole units read as whole numbers.
fn tick(v: f64) -> String {
    let rounded = (v * 1e6).round() / 1e6;
    if rounded == 0.0 {
        "0".to_owned()
    } else {
        format!("{rounded}")
    }
}

/// At most as many ticks as there are whole numbers from 0 to `span`, so
/// that plotters' steps (1, 2 or 5 times a power of ten) are whole; and at
/// most `most`.
fn whole_ticks(span: f64, most: usize) -> usize {
    (span.max(1.0).floor() as usize + 1).min(most)
}

/// A mark's label placed: its row above the plot (0 nearest), its
/// horizontal extent and its line's pixel column.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Placed {
    row: usize,
    left: i32,
    right: i32,
    line: i32,
}

/// Rows for labels of `widths` pixels at pixel columns `lines`, within
/// `lo..hi`: a label sits right of its line, or left of it, or (when
/// neither fits the canvas) as near as fits; two labels in one row are
/// `GAP` apart; no line running up to a higher row crosses a label (as far
/// as marks crowded at the canvas's right edge allow).
///
/// The rightmost marks are placed first, each in the lowest row it fits.
/// A label left of its line is taken only when no line still to be placed
/// runs under it; so a label right of its line always fits a new row on
/// top (the lines to the right end below it, and none of the labels below
/// covers its line).
fn place_labels(lines: &[i32], widths: &[i32], lo: i32, hi: i32) -> Vec<Placed> {
    let mut order: Vec<usize> = (0..lines.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(lines[i]));
    let mut placed: Vec<Option<Placed>> = vec![None; lines.len()];
    let mut done: Vec<Placed> = Vec::new();
    for (n, &i) in order.iter().enumerate() {
        let (line, width) = (lines[i], widths[i]);
        let mut spans = Vec::new();
        if line + TO_LINE + width <= hi {
            spans.push(line + TO_LINE);
        }
        if line - TO_LINE - width >= lo {
            spans.push(line - TO_LINE - width);
        }
        if spans.is_empty() {
            spans.push((line - width / 2).clamp(lo, (hi - width).max(lo)));
        }
        let later = &order[n + 1..];
        let clear: Vec<i32> = spans
            .iter()
            .copied()
            .filter(|&left| {
                later
                    .iter()
                    .all(|&j| lines[j] < left - CLEAR || lines[j] > left + width + CLEAR)
            })
            .collect();
        if !clear.is_empty() {
            spans = clear;
        }
        let fits = |p: &Placed| {
            done.iter().all(|q| {
                use std::cmp::Ordering::*;
                match q.row.cmp(&p.row) {
                    Equal => p.right + GAP <= q.left || q.right + GAP <= p.left,
                    // q's line runs up through p's row.
                    Greater => q.line < p.left - CLEAR || q.line > p.right + CLEAR,
                    // p's line runs up through q's row.
                    Less => p.line < q.left - CLEAR || p.line > q.right + CLEAR,
                }
            })
        };
        let rows = done.iter().map(|p| p.row + 1).max().unwrap_or(0);
        let chosen = (0..=rows)
            .flat_map(|row| {
                spans.iter().map(move |&left| Placed {
                    row,
                    left,
                    right: left + width,
                    line,
                })
            })
            .find(|p| fits(p))
            .unwrap_or(Placed {
                row: rows,
                left: spans[0],
                right: spans[0] + width,
                line,
            });
        done.push(chosen);
        placed[i] = Some(chosen);
    }
    placed.into_iter().flatten().collect()
}

/// A legend entry: a line or a filled box, and its name.
#[derive(Clone, Copy)]
enum Swatch {
    Line(RGBColor),
    Shade(RGBAColor),
}

const SWATCH: i32 = 22;

/// The legend's entries' top-left corners in rows from `left`, wrapped at
/// `right`; and the number of rows.
fn legend_layout(names: &[&str], left: i32, right: i32) -> (Vec<(i32, usize)>, usize) {
    let mut x = left;
    let mut row = 0;
    let mut at = Vec::new();
    for name in names {
        let width = SWATCH + 6 + text_width(name, LABEL_FONT).ceil() as i32;
        if x > left && x + width > right {
            x = left;
            row += 1;
        }
        at.push((x, row));
        x += width + 2 * GAP;
    }
    (at, if names.is_empty() { 0 } else { row + 1 })
}

fn draw_legend(
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    entries: &[(&str, Swatch)],
    left: i32,
    top: i32,
    err: &dyn Fn(&dyn std::fmt::Display) -> String,
) -> Result<(), String> {
    let names: Vec<&str> = entries.iter().map(|(n, _)| *n).collect();
    let (at, _) = legend_layout(&names, left, WIDTH as i32 - MARGIN as i32);
    let style = ("sans-serif", LABEL_FONT)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Center));
    for ((name, swatch), (x, row)) in entries.iter().zip(at) {
        let y = top + row as i32 * ROW as i32 + ROW as i32 / 2;
        match swatch {
            Swatch::Line(c) => root
                .draw(&PathElement::new(
                    [(x, y), (x + SWATCH, y)],
                    c.stroke_width(3),
                ))
                .map_err(|e| err(&e))?,
            Swatch::Shade(c) => root
                .draw(&Rectangle::new(
                    [(x, y - 6), (x + SWATCH, y + 6)],
                    c.filled(),
                ))
                .map_err(|e| err(&e))?,
        }
        root.draw(&Text::new(name.to_string(), (x + SWATCH + 6, y), &style))
            .map_err(|e| err(&e))?;
    }
    Ok(())
}

/// The title, centred at the top.
fn draw_title(
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    title: &str,
    err: &dyn Fn(&dyn std::fmt::Display) -> String,
) -> Result<(), String> {
    let style = ("sans-serif", TITLE_FONT)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Top));
    root.draw(&Text::new(
        title.to_owned(),
        (WIDTH as i32 / 2, MARGIN as i32),
        &style,
    ))
    .map_err(|e| err(&e))
}

/// The share of each series' values per bin of `bin_ms`, from 0 to `max_ms`,
/// drawn as lines, with `marks` as dashed verticals labelled above the
/// plot.
pub fn distributions(
    path: &Path,
    title: &str,
    series: &[Series<'_>],
    marks: &[Mark],
    max_ms: f64,
    bin_ms: f64,
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let bins = (max_ms / bin_ms).ceil().max(1.0) as usize;
    let shares: Vec<Vec<(f64, f64)>> = series
        .iter()
        .map(|s| {
            // Values past the chart's end are left out of the bins (but
            // count in the shares): no false peak at the right edge.
            let mut counts = vec![0u64; bins];
            for v in s.values {
                if let Some(count) = counts.get_mut((v / bin_ms) as usize) {
                    *count += 1;
                }
            }
            let n = s.values.len().max(1) as f64;
            counts
                .iter()
                .enumerate()
                .map(|(i, c)| ((i as f64 + 0.5) * bin_ms, 100.0 * *c as f64 / n))
                .collect()
        })
        .collect();
    let top = shares
        .iter()
        .flatten()
        .map(|(_, y)| *y)
        .fold(0.0_f64, f64::max)
        .max(1.0)
        * 1.1;

    // Where the marks' lines fall: plotters maps x the same way whatever
    // the heights, so a chart on a scratch canvas of this width tells.
    let mut scratch = String::new();
    let lines: Vec<i32> = {
        let area = SVGBackend::with_string(&mut scratch, (WIDTH, 100)).into_drawing_area();
        let chart = frame(&area, 0, 0)
            .build_cartesian_2d(0.0..max_ms, 0.0..top)
            .map_err(|e| err(&e))?;
        marks
            .iter()
            .map(|m| chart.backend_coord(&(m.x.clamp(0.0, max_ms), 0.0)).0)
            .collect()
    };
    let widths: Vec<i32> = marks
        .iter()
        .map(|m| text_width(&m.label, LABEL_FONT).ceil() as i32)
        .collect();
    let placed = place_labels(&lines, &widths, MARGIN as i32, (WIDTH - MARGIN) as i32);
    let label_rows = placed.iter().map(|p| p.row + 1).max().unwrap_or(0) as u32;
    let band = if label_rows == 0 {
        0
    } else {
        label_rows * ROW + 6
    };
    let names: Vec<&str> = series.iter().map(|s| s.name).collect();
    let (_, legend_rows) = legend_layout(
        &names,
        (MARGIN + Y_LABEL_AREA) as i32,
        (WIDTH - MARGIN) as i32,
    );
    let plot_top = MARGIN + TITLE_ROW + band;
    let legend_top = plot_top + PLOT_HEIGHT + X_LABEL_AREA + 8;
    let height = legend_top + legend_rows as u32 * ROW + MARGIN;

    let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    draw_title(&root, title, &err)?;
    let mut chart = frame(
        &root,
        plot_top,
        height - plot_top - PLOT_HEIGHT - X_LABEL_AREA,
    )
    .build_cartesian_2d(0.0..max_ms, 0.0..top)
    .map_err(|e| err(&e))?;
    let bin = if bin_ms < 10.0 {
        (bin_ms * 10.0).round() / 10.0
    } else {
        bin_ms.round()
    };
    let y_desc = format!("share of calls per {} ms bin (%)", tick(bin));
    chart
        .configure_mesh()
        .x_desc("duration (ms)")
        .y_desc(y_desc)
        .x_labels(whole_ticks(max_ms, 10))
        .x_label_formatter(&|v| tick(*v))
        .y_label_formatter(&|v| tick(*v))
        .label_style(("sans-serif", TICK_FONT))
        .axis_desc_style(("sans-serif", DESC_FONT))
        .draw()
        .map_err(|e| err(&e))?;
    for (i, points) in shares.iter().enumerate() {
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                colour(i).stroke_width(2),
            ))
            .map_err(|e| err(&e))?;
    }
    let mark_colour = |label: &str| {
        series
            .iter()
            .position(|s| {
                label
                    .strip_prefix(s.name)
                    .is_some_and(|rest| rest.starts_with(':'))
            })
            .map_or(BLACK, colour)
    };
    let label_style = TextStyle::from(("sans-serif", LABEL_FONT).into_font());
    for (mark, p) in marks.iter().zip(&placed) {
        let c = mark_colour(&mark.label);
        let x = mark.x.clamp(0.0, max_ms);
        chart
            .draw_series(DashedLineSeries::new(
                [(x, 0.0), (x, top)],
                6,
                4,
                c.stroke_width(1),
            ))
            .map_err(|e| err(&e))?;
        // The line up to its label's row, and the label.
        let baseline = plot_top as i32 - 4 - p.row as i32 * ROW as i32;
        root.draw(&PathElement::new(
            [(p.line, plot_top as i32), (p.line, baseline)],
            c.stroke_width(1),
        ))
        .map_err(|e| err(&e))?;
        // A label left of its line ends at it, whatever the font's widths.
        let (at, side) = if p.right == p.line - TO_LINE {
            (p.right, HPos::Right)
        } else {
            (p.left, HPos::Left)
        };
        root.draw(&Text::new(
            mark.label.clone(),
            (at, baseline),
            label_style.color(&c).pos(Pos::new(side, VPos::Bottom)),
        ))
        .map_err(|e| err(&e))?;
    }
    let entries: Vec<(&str, Swatch)> = series
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name, Swatch::Line(colour(i))))
        .collect();
    draw_legend(
        &root,
        &entries,
        (MARGIN + Y_LABEL_AREA) as i32,
        legend_top as i32,
        &err,
    )?;
    root.present().map_err(|e| err(&e))
}

/// The chart's frame: margins and label areas; the plot from `top` down,
/// `bottom` pixels left under its x labels.
fn frame<'a, 'b, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    top: u32,
    bottom: u32,
) -> ChartBuilder<'a, 'b, DB> {
    let mut builder = ChartBuilder::on(area);
    builder
        .margin_top(top)
        .margin_bottom(bottom)
        .margin_left(MARGIN)
        .margin_right(MARGIN_RIGHT)
        .x_label_area_size(X_LABEL_AREA)
        .y_label_area_size(Y_LABEL_AREA);
    builder
}

/// One minute of carts against the breaker.
pub struct MinutePoint {
    /// Minutes from the first.
    pub minute: f64,
    pub steps: f64,
    pub started: f64,
    pub payments: f64,
    /// The breaker was anything but closed during the minute.
    pub breaker_open: bool,
}

/// `lifeboat carts --minutes` rows summed over operators per minute; a
/// minute counts as not closed when any operator's breaker was not closed
/// in it.
pub fn carts_rows(
    path: &Path,
    title: &str,
    rows: &[crate::carts::MinuteRow],
) -> Result<(), String> {
    let Some(first) = rows.iter().map(|r| r.minute).min() else {
        return Err("no minutes to draw".to_owned());
    };
    let mut points: std::collections::BTreeMap<i64, MinutePoint> =
        std::collections::BTreeMap::new();
    for row in rows {
        let m = (row.minute - first).num_minutes();
        let point = points.entry(m).or_insert(MinutePoint {
            minute: m as f64,
            steps: 0.0,
            started: 0.0,
            payments: 0.0,
            breaker_open: false,
        });
        point.steps += f64::from(row.steps);
        point.started += f64::from(row.carts_started);
        point.payments += f64::from(row.reached_payment);
        point.breaker_open |= row.breaker != "closed";
    }
    let points: Vec<MinutePoint> = points.into_values().collect();
    carts_minutes(path, title, &points)
}

/// Steps, carts started and payments per minute, the minutes the breaker
/// was not closed shaded.
pub fn carts_minutes(path: &Path, title: &str, points: &[MinutePoint]) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let last = points.iter().map(|p| p.minute).fold(1.0_f64, f64::max) + 1.0;
    let top = points
        .iter()
        .map(|p| p.steps.max(p.started).max(p.payments))
        .fold(1.0_f64, f64::max)
        * 1.15;
    let shade = RGBColor(214, 39, 40).mix(0.15);
    type Line = (&'static str, fn(&MinutePoint) -> f64);
    let lines: [Line; 3] = [
        ("steps", |p| p.steps),
        ("carts started", |p| p.started),
        ("carts reaching payment", |p| p.payments),
    ];
    let mut entries: Vec<(&str, Swatch)> = vec![("breaker not closed", Swatch::Shade(shade))];
    entries.extend(
        lines
            .iter()
            .enumerate()
            .map(|(i, (name, _))| (*name, Swatch::Line(colour(i)))),
    );
    let names: Vec<&str> = entries.iter().map(|(n, _)| *n).collect();
    let (_, legend_rows) = legend_layout(
        &names,
        (MARGIN + Y_LABEL_AREA) as i32,
        (WIDTH - MARGIN) as i32,
    );
    let plot_top = MARGIN + TITLE_ROW;
    let legend_top = plot_top + PLOT_HEIGHT + X_LABEL_AREA + 8;
    let height = legend_top + legend_rows as u32 * ROW + MARGIN;

    let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    draw_title(&root, title, &err)?;
    let mut chart = frame(
        &root,
        plot_top,
        height - plot_top - PLOT_HEIGHT - X_LABEL_AREA,
    )
    .build_cartesian_2d(0.0..last, 0.0..top)
    .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("minutes from the first (min)")
        .y_desc("steps and carts per minute (count)")
        .x_labels(whole_ticks(last, 12))
        .y_labels(whole_ticks(top, 10))
        .x_label_formatter(&|v| tick(*v))
        .y_label_formatter(&|v| tick(*v))
        .label_style(("sans-serif", TICK_FONT))
        .axis_desc_style(("sans-serif", DESC_FONT))
        .draw()
        .map_err(|e| err(&e))?;
    chart
        .draw_series(
            points
                .iter()
                .filter(|p| p.breaker_open)
                .map(|p| Rectangle::new([(p.minute, 0.0), (p.minute + 1.0, top)], shade.filled())),
        )
        .map_err(|e| err(&e))?;
    for (i, (_, value)) in lines.iter().enumerate() {
        chart
            .draw_series(LineSeries::new(
                points.iter().map(|p| (p.minute + 0.5, value(p))),
                colour(i).stroke_width(2),
            ))
            .map_err(|e| err(&e))?;
    }
    draw_legend(
        &root,
        &entries,
        (MARGIN + Y_LABEL_AREA) as i32,
        legend_top as i32,
        &err,
    )?;
    root.present().map_err(|e| err(&e))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn charts_are_written_as_svg() {
        let dir = std::env::temp_dir().join(format!("lifeboat-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("d.svg");
        let a: Vec<f64> = (0..1000).map(|i| 1000.0 + f64::from(i)).collect();
        distributions(
            &path,
            "durations",
            &[Series {
                name: "old",
                values: &a,
            }],
            &[Mark {
                label: "budget 3000 ms".into(),
                x: 3000.0,
            }],
            8000.0,
            100.0,
        )
        .unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("budget 3000 ms"),
            "{}",
            &svg[..200.min(svg.len())]
        );
        let path = dir.join("m.svg");
        let points: Vec<MinutePoint> = (0..10)
            .map(|m| MinutePoint {
                minute: f64::from(m),
                steps: 100.0,
                started: 20.0,
                payments: 15.0,
                breaker_open: (3..6).contains(&m),
            })
            .collect();
        carts_minutes(&path, "carts", &points).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.contains("breaker not closed"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn ticks_have_no_needless_decimals() {
        assert_eq!(tick(5.0), "5");
        assert_eq!(tick(1000.0), "1000");
        assert_eq!(tick(0.30000000000000004), "0.3");
        assert_eq!(tick(-0.0), "0");
        assert_eq!(whole_ticks(0.5, 10), 2);
        assert_eq!(whole_ticks(3.2, 10), 4);
        assert_eq!(whole_ticks(8000.0, 10), 10);
    }

    /// Two labels in a row never meet, and no line to a higher row
    /// crosses a label: on marks at one place, and crowded, and at the
    /// edges.
    #[test]
    fn labels_are_placed_apart() {
        let cases: [(&[i32], &[i32]); 4] = [
            (
                &[250, 250, 383, 383, 486, 486],
                &[200, 200, 200, 200, 180, 180],
            ),
            (&[820, 370, 370], &[170, 170, 190]),
            (&[12, 13, 14, 886, 887, 888], &[300, 40, 300, 300, 40, 300]),
            (&[100, 140, 180, 220, 260, 300, 340], &[120; 7]),
        ];
        for (lines, widths) in cases {
            let placed = place_labels(lines, widths, 12, 888);
            assert_eq!(placed.len(), lines.len());
            for (i, p) in placed.iter().enumerate() {
                assert!(p.left >= 12 && p.right <= 888, "{p:?} off the canvas");
                assert_eq!(p.right - p.left, widths[i]);
                for q in &placed {
                    if q.row > p.row {
                        assert!(
                            q.line < p.left - CLEAR || q.line > p.right + CLEAR,
                            "{q:?}'s line crosses {p:?}"
                        );
                    }
                }
                for q in &placed[i + 1..] {
                    if p.row == q.row {
                        assert!(
                            p.right + GAP <= q.left || q.right + GAP <= p.left,
                            "{p:?} and {q:?} meet"
                        );
                    }
                }
            }
        }
    }
}
