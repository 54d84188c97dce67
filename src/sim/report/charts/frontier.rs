//! `frontier.png` of `simulate --sweep`: each point's mean cost against its
//! mean lost work, quartermaster's points labelled with their values and
//! joined in the order swept, the baselines marked, so a team reads off
//! what each setting buys.

use super::{draw_series_key, render, strategy_colour, Area, DrawResult, SANS};
use crate::sim::report::{usd, write_file, Result};
use crate::sim::sweep::{SweepReport, BASELINES, SWEPT};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::{Path, PathBuf};

/// How a mark is drawn.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Shape {
    /// A swept value on the frontier.
    Dot,
    /// A swept value another mark beats on both counts.
    Ring,
    /// greedy.
    Triangle,
    /// karpenter.
    Cross,
    /// on-demand.
    Square,
}

/// Each baseline's shape, in the order of [`BASELINES`].
const BASELINE_SHAPES: [Shape; 3] = [Shape::Triangle, Shape::Cross, Shape::Square];

/// A mark as drawn: where (lost work in percent, cost), its label, colour
/// and shape.
#[derive(Debug)]
struct Drawn {
    label: String,
    lost_pct: f64,
    cost: f64,
    colour: RGBColor,
    shape: Shape,
}

/// Writes `frontier.png` into `dir` (which must exist) and returns its
/// path.
///
/// # Errors
/// The chart's failure to draw, encode or write, naming the file.
pub fn write_frontier(report: &SweepReport, dir: &Path) -> Result<PathBuf> {
    let path = dir.join("frontier.png");
    let png = render(&path, |root| draw(report, root))?;
    write_file(&path, &png)?;
    Ok(path)
}

/// The swept points in sweep order (a ring where another mark beats
/// one), then the baselines'; and the frontier's line, least lost first.
fn marks(report: &SweepReport) -> (Vec<Drawn>, Vec<(f64, f64)>) {
    let frontier = report.frontier();
    let mut drawn: Vec<Drawn> = frontier
        .swept
        .iter()
        .zip(&frontier.beaten_by)
        .filter_map(|(m, beaten)| {
            let m = m.as_ref()?;
            Some(Drawn {
                label: m.label.clone(),
                lost_pct: m.lost * 100.0,
                cost: m.cost,
                colour: strategy_colour(0),
                shape: if beaten.is_some() {
                    Shape::Ring
                } else {
                    Shape::Dot
                },
            })
        })
        .collect();
    for m in &frontier.baselines {
        // "greedy", or "greedy (x=1)" where it moved with the values.
        let i = BASELINES
            .iter()
            .position(|b| m.label == *b || m.label.starts_with(&format!("{b} (")))
            .unwrap_or(0);
        // Baselines that came out the same share one mark and its label.
        if let Some(same) = drawn.iter_mut().find(|d| {
            d.shape != Shape::Dot
                && d.shape != Shape::Ring
                && d.cost == m.cost
                && d.lost_pct == m.lost * 100.0
        }) {
            same.label = format!("{} = {}", same.label, m.label);
            continue;
        }
        drawn.push(Drawn {
            label: m.label.clone(),
            lost_pct: m.lost * 100.0,
            cost: m.cost,
            colour: strategy_colour(i + 1),
            shape: BASELINE_SHAPES[i],
        });
    }
    let line = frontier
        .line
        .iter()
        .filter_map(|&i| frontier.swept[i].as_ref())
        .map(|m| (m.lost * 100.0, m.cost))
        .collect();
    (drawn, line)
}

/// Half the side of the box a mark covers, in pixels (the largest marker
/// is a triangle of size 8).
const MARK_HALF: i32 = 8;

/// A box in pixels: left, top, right, bottom.
type PixelBox = (i32, i32, i32, i32);

fn overlap(a: PixelBox, b: PixelBox) -> bool {
    a.0 < b.2 && b.0 < a.2 && a.1 < b.3 && b.1 < a.3
}

/// Where each mark's label goes: the top-left corner of its text, in
/// pixels from its mark, given the marks' pixel positions and the labels'
/// sizes. Each label takes the first of eight places around its mark
/// (up-right first) that covers no mark and no label placed before it, so
/// values that land close together (riskAversion 1 and 2 a few pixels
/// apart) stay legible; where all eight are taken it goes up-right.
fn label_offsets(at: &[(i32, i32)], sizes: &[(u32, u32)]) -> Vec<(i32, i32)> {
    let marks: Vec<PixelBox> = at
        .iter()
        .map(|&(x, y)| (x - MARK_HALF, y - MARK_HALF, x + MARK_HALF, y + MARK_HALF))
        .collect();
    let mut placed: Vec<PixelBox> = Vec::new();
    at.iter()
        .zip(sizes)
        .map(|(&(x, y), &(w, h))| {
            let (w, h) = (w as i32, h as i32);
            let gap = MARK_HALF + 1;
            let places = [
                (gap, -5 - h),
                (gap, 5),
                (-gap - w, -5 - h),
                (-gap - w, 5),
                (gap + 2, -h / 2),
                (-gap - 2 - w, -h / 2),
                (-w / 2, -gap - h),
                (-w / 2, gap),
            ];
            let box_at = |(dx, dy): (i32, i32)| (x + dx, y + dy, x + dx + w, y + dy + h);
            let free = |o: &(i32, i32)| {
                let b = box_at(*o);
                !marks.iter().chain(&placed).any(|m| overlap(b, *m))
            };
            let offset = places.iter().copied().find(free).unwrap_or(places[0]);
            placed.push(box_at(offset));
            offset
        })
        .collect()
}

/// `shape` in `colour`, centred at `(x, y)` (pixels from its anchor).
fn marker<DB: DrawingBackend>(
    shape: Shape,
    colour: RGBColor,
    (x, y): (i32, i32),
) -> DynElement<'static, DB, (i32, i32)> {
    let filled = colour.filled();
    match shape {
        Shape::Dot => Circle::new((x, y), 6, filled).into_dyn(),
        Shape::Ring => Circle::new((x, y), 6, colour.stroke_width(2)).into_dyn(),
        Shape::Square => Rectangle::new([(x - 6, y - 6), (x + 6, y + 6)], filled).into_dyn(),
        Shape::Cross => Cross::new((x, y), 6, colour.stroke_width(3)).into_dyn(),
        Shape::Triangle => TriangleMarker::new((x, y), 8, filled).into_dyn(),
    }
}

fn draw(report: &SweepReport, root: &Area<'_>) -> DrawResult {
    let (drawn, line) = marks(report);
    let x_top = drawn
        .iter()
        .map(|m| m.lost_pct)
        .fold(0.0, f64::max)
        .max(0.1)
        * 1.15;
    let y_top = drawn.iter().map(|m| m.cost).fold(0.0, f64::max).max(1.0) * 1.1;
    let seeds = report.seeds();
    let over = match (seeds.first(), seeds.last()) {
        (Some(a), Some(b)) if seeds.len() > 1 => format!("mean over seeds {a}-{b}"),
        (Some(a), _) => format!("seed {a}"),
        _ => "no runs".to_string(),
    };
    let scenario = report
        .points
        .first()
        .and_then(|(_, r)| r.runs.first())
        .map_or("", |r| r.scenario.as_str());
    let caption = format!("Cost against lost work: {scenario}, {over}");
    let body = root.titled(&caption, (SANS, 24))?;
    let (strip, body) = body.split_vertically(28);
    let note = format!(
        "{SWEPT} with {} set to the value beside each dot; the line joins the values no other value beats; a ring: beaten on both counts",
        report.paths.join(", ")
    );
    strip.draw(&Text::new(
        note,
        ((strip.dim_in_pixel().0 / 2) as i32, 12),
        TextStyle::from((SANS, 15).into_font()).pos(Pos::new(HPos::Center, VPos::Center)),
    ))?;
    let mut chart = ChartBuilder::on(&body)
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(90)
        .build_cartesian_2d(0.0..x_top, 0.0..y_top)?;
    chart
        .configure_mesh()
        .x_desc("lost work (% of the GPU-hours jobs held)")
        .y_desc("cost of the run (USD)")
        .axis_desc_style((SANS, 16))
        .label_style((SANS, 13))
        .x_label_formatter(&|v| format!("{v:.1}%"))
        .y_label_formatter(&|v| usd(v.round()).trim_end_matches(".00").to_string())
        .max_light_lines(4)
        .light_line_style(RGBColor(240, 240, 240))
        .draw()?;
    chart.draw_series(LineSeries::new(
        line,
        strategy_colour(0).mix(0.5).stroke_width(2),
    ))?;
    let label_style = TextStyle::from((SANS, 14).into_font()).pos(Pos::new(HPos::Left, VPos::Top));
    let at: Vec<(i32, i32)> = (drawn.iter())
        .map(|m| chart.backend_coord(&(m.lost_pct, m.cost)))
        .collect();
    let sizes = (drawn.iter())
        .map(|m| root.estimate_text_size(&m.label, &label_style))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    for (m, offset) in drawn.iter().zip(label_offsets(&at, &sizes)) {
        chart.draw_series(std::iter::once(
            EmptyElement::at((m.lost_pct, m.cost))
                + marker(m.shape, m.colour, (0, 0))
                + Text::new(m.label.clone(), offset, label_style.clone()),
        ))?;
    }
    // The key: the swept strategy's dot, and each baseline's mark shown.
    let mut key = vec![(SWEPT.to_string(), Shape::Dot, strategy_colour(0))];
    for (i, (name, shape)) in BASELINES.iter().zip(BASELINE_SHAPES).enumerate() {
        if drawn.iter().any(|m| m.shape == shape) {
            key.push((name.to_string(), shape, strategy_colour(i + 1)));
        }
    }
    for (name, shape, colour) in key {
        chart
            .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())?
            .label(name)
            .legend(move |(x, y)| marker(shape, colour, (x + 10, y)));
    }
    // Cheap and losing little is where no run lands: the key's corner.
    draw_series_key(&mut chart, SeriesLabelPosition::LowerLeft)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::sweep::fixtures::sweep_of;

    #[test]
    fn labels_of_marks_close_together_cover_neither_each_other_nor_any_mark() {
        // spot-training's riskAversion 1, 2, 3 and 4: four marks within a
        // few pixels, each label 8 by 14 pixels.
        let at = [(770, 522), (764, 523), (744, 508), (749, 492), (1043, 499)];
        let sizes = [(8, 14); 5];
        let offsets = label_offsets(&at, &sizes);
        let boxes: Vec<PixelBox> = (at.iter().zip(&offsets))
            .map(|(&(x, y), &(dx, dy))| (x + dx, y + dy, x + dx + 8, y + dy + 14))
            .collect();
        for (i, b) in boxes.iter().enumerate() {
            for (j, c) in boxes.iter().enumerate().filter(|(j, _)| *j != i) {
                assert!(!overlap(*b, *c), "labels {i} and {j}: {b:?} {c:?}");
            }
            for &(x, y) in &at {
                let mark = (x - MARK_HALF, y - MARK_HALF, x + MARK_HALF, y + MARK_HALF);
                assert!(
                    !overlap(*b, mark),
                    "label {i} {b:?} covers the mark at {x},{y}"
                );
            }
        }
        // A lone mark keeps the first place, up and to the right.
        assert_eq!(label_offsets(&[(100, 100)], &[(8, 14)]), [(9, -19)]);
    }

    #[test]
    fn the_frontier_marks_each_value_and_each_baseline_once_and_rings_a_beaten_value() {
        // "9" costs more than greedy and loses more: beaten, a ring, off
        // the line.
        let mut report = sweep_of(&[("1", 80.0, 6.0), ("4", 150.0, 3.0), ("9", 120.0, 9.0)]);
        // karpenter ran too, the same at every point.
        for (_, runs) in &mut report.points {
            let r = &mut runs.runs[0];
            let mut k = r.strategies["greedy"].clone();
            (k.total_cost, k.lost_gpu_hours) = (90.0, 5.0);
            r.strategies.insert("karpenter".into(), k);
        }
        let (drawn, line) = marks(&report);
        let at: Vec<(&str, f64, f64, Shape)> = drawn
            .iter()
            .map(|m| (m.label.as_str(), m.lost_pct, m.cost, m.shape))
            .collect();
        assert_eq!(
            at,
            [
                ("1", 6.0, 80.0, Shape::Dot),
                ("4", 3.0, 150.0, Shape::Dot),
                ("9", 9.0, 120.0, Shape::Ring),
                ("greedy", 8.0, 100.0, Shape::Triangle),
                ("karpenter", 5.0, 90.0, Shape::Cross),
                ("on-demand", 0.0, 200.0, Shape::Square)
            ]
        );
        assert_eq!(line, [(3.0, 150.0), (6.0, 80.0)], "least lost first");
        let dir = crate::sim::report::fixtures::temp_dir("frontier");
        std::fs::create_dir_all(&dir).unwrap();
        let path = write_frontier(&report, &dir).unwrap();
        // A baseline that came out as another shares its mark.
        let mut same = sweep_of(&[("1", 80.0, 6.0)]);
        let r = &mut same.points[0].1.runs[0];
        let k = r.strategies["greedy"].clone();
        r.strategies.insert("karpenter".into(), k);
        let labels: Vec<String> = marks(&same).0.into_iter().map(|m| m.label).collect();
        assert_eq!(labels, ["1", "greedy = karpenter", "on-demand"]);
        let png = std::fs::read(&path).unwrap();
        let info = png::Decoder::new(std::io::Cursor::new(png))
            .read_info()
            .unwrap();
        assert_eq!(
            (info.info().width, info.info().height),
            (super::super::WIDTH, super::super::HEIGHT)
        );
        write_frontier(&SweepReport::default(), &dir).unwrap();
        let _ = std::fs::remove_dir_all(dir);
    }
}
