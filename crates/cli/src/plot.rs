//! SVG charts for `--plot FILE`: duration distributions with their budgets
//! marked (advise-timeouts, replay) and carts minute by minute against the
//! breaker (carts, demo). Drawn with `plotters`' SVG backend: no browser, no
//! fonts installed.

use std::path::Path;

use plotters::prelude::*;

/// One distribution: a name for the legend and its values (milliseconds).
pub struct Series<'a> {
    pub name: &'a str,
    pub values: &'a [f64],
}

/// A vertical line at `x` ms, labelled.
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

/// The share of each series' values per bin of `bin_ms`, from 0 to `max_ms`,
/// drawn as lines, with `marks` as dashed verticals.
pub fn distributions(
    path: &Path,
    title: &str,
    series: &[Series<'_>],
    marks: &[Mark],
    max_ms: f64,
    bin_ms: f64,
) -> Result<(), String> {
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
                .map(|(i, c)| ((i as f64 + 0.5) * bin_ms, *c as f64 / n))
                .collect()
        })
        .collect();
    let top = shares
        .iter()
        .flatten()
        .map(|(_, y)| *y)
        .fold(0.0_f64, f64::max)
        .max(0.01)
        * 1.1;
    let root = SVGBackend::new(path, (900, 480)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..max_ms, 0.0..top)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("duration (ms)")
        .y_desc("share of calls per bin")
        .draw()
        .map_err(|e| err(&e))?;
    for (i, (s, points)) in series.iter().zip(&shares).enumerate() {
        let c = colour(i);
        chart
            .draw_series(LineSeries::new(points.iter().copied(), c.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(s.name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], c.stroke_width(2)));
    }
    for mark in marks {
        let x = mark.x.min(max_ms);
        chart
            .draw_series(DashedLineSeries::new(
                [(x, 0.0), (x, top)],
                6,
                4,
                BLACK.stroke_width(1),
            ))
            .map_err(|e| err(&e))?;
        chart
            .draw_series(std::iter::once(Text::new(
                mark.label.clone(),
                (x, top * 0.97),
                ("sans-serif", 13),
            )))
            .map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
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
    rows: &[crate::ops::carts::MinuteRow],
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
    let root = SVGBackend::new(path, (900, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..last, 0.0..top)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("minute")
        .y_desc("per minute")
        .draw()
        .map_err(|e| err(&e))?;
    let shade = RGBColor(214, 39, 40).mix(0.15);
    chart
        .draw_series(
            points
                .iter()
                .filter(|p| p.breaker_open)
                .map(|p| Rectangle::new([(p.minute, 0.0), (p.minute + 1.0, top)], shade.filled())),
        )
        .map_err(|e| err(&e))?
        .label("breaker not closed")
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 18, y + 5)], shade.filled()));
    type Line = (&'static str, fn(&MinutePoint) -> f64);
    let lines: [Line; 3] = [
        ("steps", |p| p.steps),
        ("carts started", |p| p.started),
        ("carts reaching payment", |p| p.payments),
    ];
    for (i, (name, value)) in lines.iter().enumerate() {
        let c = colour(i);
        chart
            .draw_series(LineSeries::new(
                points.iter().map(|p| (p.minute + 0.5, value(p))),
                c.stroke_width(2),
            ))
            .map_err(|e| err(&e))?
            .label(*name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
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
}
