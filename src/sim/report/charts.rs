//! PNG charts of a report's time series: cumulative cost, nodes alive and
//! pending pods against hours. Drawn with plotters into memory, encoded with
//! `png`; text uses an embedded DejaVu Sans subset (`assets/fonts/`), so no
//! system font or fontconfig is needed.

mod frontier;

pub use frontier::write_frontier;

use super::{ordered, write_file, Error, Result};
use crate::sim::result::{Sample, SimReport};
use plotters::coord::combinators::IntoLogRange;
use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::element::ComposedElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::FontStyle;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Chart size in pixels.
const WIDTH: u32 = 1200;
const HEIGHT: u32 = 700;

/// DejaVu Sans cut down to Latin-1 and common punctuation; see
/// `assets/fonts/README.md` and its licence beside it.
static FONT: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSans-subset.ttf");

/// The family name every text style below uses, registered to [`FONT`].
const SANS: &str = "sans-serif";

/// Strategy colours, by position in presentation order (tableau palette).
const STRATEGY_COLOURS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),  // blue: quartermaster
    RGBColor(255, 127, 14),  // orange: greedy
    RGBColor(214, 39, 40),   // red: on-demand
    RGBColor(127, 127, 127), // grey: static
    RGBColor(44, 160, 44),   // green
    RGBColor(23, 190, 207),  // cyan
];

/// Instance-family colours in the node panels, distinct from each other
/// and from the strategies' colours (which the panels' totals are drawn
/// in); a family past the tenth repeats a colour, dashed.
const FAMILY_COLOURS: [RGBColor; 10] = [
    RGBColor(148, 103, 189), // purple
    RGBColor(140, 86, 75),   // brown
    RGBColor(227, 119, 194), // pink
    RGBColor(188, 189, 34),  // olive
    RGBColor(0, 0, 0),       // black
    RGBColor(0, 128, 128),   // teal
    RGBColor(230, 171, 2),   // gold
    RGBColor(40, 40, 150),   // navy
    RGBColor(170, 0, 90),    // crimson
    RGBColor(120, 200, 80),  // light green
];

/// Width of a panel's spot and on-demand totals: wide and pale, drawn under
/// the families' lines, so that a family holding every node of a kind shows
/// on top of its total instead of vanishing under it.
const TOTAL_WIDTH: u32 = 6;

type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;
type DrawResult = std::result::Result<(), Box<dyn std::error::Error>>;
/// A legend sample: two path segments relative to an anchor.
type Mark<DB> =
    ComposedElement<BackendPoint, DB, PathElement<BackendPoint>, PathElement<BackendPoint>>;
type BackendPoint = (i32, i32);
type Draw = fn(&SimReport, &Area<'_>) -> DrawResult;

/// The charts, by file name.
const CHARTS: [(&str, Draw); 4] = [
    ("cost.png", draw_cost),
    ("nodes.png", draw_nodes),
    ("pending.png", draw_pending),
    ("interruptions.png", draw_interruptions),
];

/// Draws into `dir` (created if needed; files of these names replaced):
/// - `cost.png`: cumulative cost, one line per strategy;
/// - `nodes.png`: one panel per strategy (own y scale), spot nodes solid and
///   on-demand dashed in the strategy's colour, each instance family thin;
/// - `pending.png`: pending pods, one panel per strategy (own y scale);
/// - `interruptions.png`: interruptions (left) and GPU-hours lost (right)
///   so far, one line per strategy.
///
/// Each is 1200x700 with a title, axis labels (hours on x) and a legend (a
/// key strip under the title for the panelled charts). Returns the paths in
/// that order.
///
/// # Errors
/// [`Error::CreateDir`] if `dir` cannot be created; otherwise the first
/// chart's failure to load the font, draw, encode or write, naming the file
/// (charts before it stay written).
pub fn write_charts(report: &SimReport, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|source| Error::CreateDir {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut paths = Vec::with_capacity(CHARTS.len());
    for (name, draw) in CHARTS {
        let path = dir.join(name);
        let png = render(&path, |root| draw(report, root))?;
        write_file(&path, &png)?;
        paths.push(path);
    }
    Ok(paths)
}

/// Draws one chart into an RGB buffer and encodes it as PNG; `path` only
/// names the chart in errors.
fn render(path: &Path, draw: impl FnOnce(&Area<'_>) -> DrawResult) -> Result<Vec<u8>> {
    if !font_registered() {
        return Err(Error::LoadFont {
            path: path.to_path_buf(),
        });
    }
    let mut rgb = vec![0u8; (WIDTH * HEIGHT * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (WIDTH, HEIGHT)).into_drawing_area();
        let drawn = root
            .fill(&WHITE)
            .map_err(Into::into)
            .and_then(|()| draw(&root))
            .and_then(|()| root.present().map_err(Into::into));
        drawn.map_err(|e| Error::Draw {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    }
    encode_png(&rgb).map_err(|source| Error::EncodePng {
        path: path.to_path_buf(),
        source,
    })
}

fn encode_png(rgb: &[u8]) -> std::result::Result<Vec<u8>, png::EncodingError> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, WIDTH, HEIGHT);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(rgb)?;
    writer.finish()?;
    Ok(out)
}

/// Registers [`FONT`] as plotters' `sans-serif` once per process; false if
/// plotters rejected it.
fn font_registered() -> bool {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    *REGISTERED
        .get_or_init(|| plotters::style::register_font(SANS, FontStyle::Normal, FONT).is_ok())
}

/// One line of a chart, with its legend entry.
struct Line {
    label: String,
    colour: RGBColor,
    width: u32,
    dashed: bool,
    /// (hours, value), in time order.
    points: Vec<(f64, f64)>,
}

impl Line {
    fn style(&self) -> ShapeStyle {
        ShapeStyle {
            color: self.colour.to_rgba(),
            filled: false,
            stroke_width: self.width,
        }
    }
}

/// What a value is: money gets dollar labels on the y axis, counts whole
/// numbers.
#[derive(Clone, Copy, PartialEq)]
enum Unit {
    Usd,
    Count,
}

/// One chart's frame.
struct Frame<'a> {
    caption: &'a str,
    caption_size: u32,
    y_desc: &'a str,
    unit: Unit,
    x_max: f64,
    y_max: f64,
    /// The bottom of a logarithmic y axis; `None` for a linear one from 0.
    log_floor: Option<f64>,
    /// Where the legend goes; none for panels, which share a key strip.
    legend: Option<SeriesLabelPosition>,
}

/// One line per strategy on one chart: comparing totals is the point. When
/// one total dwarfs another ([`DWARFS`]), the y axis is logarithmic, so that
/// the dearest (static's node groups sized for the peak) does not flatten
/// the others along the bottom: equal gaps are equal ratios.
fn draw_cost(report: &SimReport, root: &Area<'_>) -> DrawResult {
    let lines = strategy_lines(report, |s| s.cumulative_cost);
    let caption = format!("Cumulative cost by strategy: {}", report.scenario);
    let log_floor = log_floor(&lines);
    let top = y_max(&lines, Unit::Usd);
    plot(
        root,
        &Frame {
            caption: &caption,
            caption_size: 26,
            y_desc: if log_floor.is_some() {
                "cumulative cost (USD, log scale)"
            } else {
                "cumulative cost (USD)"
            },
            unit: Unit::Usd,
            x_max: x_max(report),
            // Room above the top line for the legend, a ratio on a log axis.
            y_max: if log_floor.is_some() { top * 1.6 } else { top },
            log_floor,
            legend: Some(SeriesLabelPosition::UpperLeft),
        },
        &lines,
    )
}

/// How many times the smallest final total the largest may be before the
/// cost chart goes logarithmic: a line under a fifth of the axis is too
/// flat to read.
const DWARFS: f64 = 5.0;

/// The bottom of the cost chart's log axis when the largest line's last
/// value is over [`DWARFS`] times the smallest's: the power of ten at or
/// under a twentieth of the smallest, so its growth spans over a decade;
/// `None` for a linear axis.
fn log_floor(lines: &[Line]) -> Option<f64> {
    let finals: Vec<f64> = lines
        .iter()
        .filter_map(|l| l.points.last().map(|&(_, y)| y))
        .collect();
    let least = finals.iter().copied().fold(f64::INFINITY, f64::min);
    let most = finals.iter().copied().fold(0.0, f64::max);
    (least > 0.0 && most > least * DWARFS).then(|| 10f64.powf((least / 20.0).log10().floor()))
}

/// One panel per strategy, each on its own scale: pending counts are spiky and
/// overlap when drawn together.
fn draw_pending(report: &SimReport, root: &Area<'_>) -> DrawResult {
    let panels: Vec<(&str, Vec<Line>)> = ordered(report)
        .into_iter()
        .zip(strategy_lines(report, |s| f64::from(s.pending_pods)))
        .map(|((name, _), line)| (name, vec![line]))
        .collect();
    let key: Vec<Line> = panels.iter().flat_map(|(_, l)| l).map(key_entry).collect();
    let title = format!("Pending pods by strategy: {}", report.scenario);
    small_multiples(root, &title, &key, "pending pods (count)", report, &panels)
}

/// Two panels side by side, one line per strategy in each: interruptions of
/// running jobs so far, and GPU-hours of work lost so far.
fn draw_interruptions(report: &SimReport, root: &Area<'_>) -> DrawResult {
    let title = format!(
        "Interruptions and lost GPU-hours by strategy: {}",
        report.scenario
    );
    let body = root.titled(&title, (SANS, 24))?;
    let halves = body.split_evenly((1, 2));
    let x_max = x_max(report);
    type Value = fn(&Sample) -> f64;
    let panels: [(&str, &str, Value); 2] = [
        ("Interruptions so far", "interruptions (count)", |s| {
            f64::from(s.interruptions)
        }),
        ("GPU-hours lost so far", "lost work (GPU-hours)", |s| {
            s.lost_gpu_hours
        }),
    ];
    for (area, (caption, y_desc, value)) in halves.iter().zip(panels) {
        let lines = merge_zero_lines(strategy_lines(report, value));
        plot(
            area,
            &Frame {
                caption,
                caption_size: 18,
                y_desc,
                unit: Unit::Count,
                x_max,
                y_max: y_max(&lines, Unit::Count),
                log_floor: None,
                legend: Some(SeriesLabelPosition::UpperLeft),
            },
            &lines,
        )?;
    }
    Ok(())
}

/// One panel per strategy, each on its own scale: spot nodes solid and
/// on-demand dashed, wide and pale in the strategy's colour; each instance
/// family on top in its own colour.
fn draw_nodes(report: &SimReport, root: &Area<'_>) -> DrawResult {
    let families = super::families(report);
    let family_line = |j: usize, family: &str, samples: &[&Sample]| {
        let colour = FAMILY_COLOURS[j % FAMILY_COLOURS.len()];
        let dashed = j >= FAMILY_COLOURS.len();
        line(family, colour, 2, dashed, samples, |s| {
            f64::from(s.nodes_by_family.get(family).copied().unwrap_or(0))
        })
    };
    let panels: Vec<(&str, Vec<Line>)> = ordered(report)
        .into_iter()
        .enumerate()
        .map(|(i, (name, r))| {
            let colour = pale(strategy_colour(i));
            let samples = sorted(&r.timeseries);
            let mut lines = vec![
                line("spot", colour, TOTAL_WIDTH, false, &samples, |s| {
                    f64::from(s.spot_nodes)
                }),
                line("on-demand", colour, TOTAL_WIDTH, true, &samples, |s| {
                    f64::from(s.on_demand_nodes)
                }),
            ];
            for (j, family) in families.iter().enumerate() {
                if samples
                    .iter()
                    .any(|s| s.nodes_by_family.contains_key(*family))
                {
                    lines.push(family_line(j, family, &samples));
                }
            }
            (name, lines)
        })
        .collect();
    let neutral = pale(RGBColor(60, 60, 60));
    let mut key = vec![
        line("spot (all)", neutral, TOTAL_WIDTH, false, &[], |_| 0.0),
        line("on-demand (all)", neutral, TOTAL_WIDTH, true, &[], |_| 0.0),
    ];
    for (j, family) in families.iter().enumerate() {
        key.push(family_line(j, family, &[]));
    }
    let title = format!(
        "Nodes alive by strategy (totals pale in the strategy's colour, families on top): {}",
        report.scenario
    );
    small_multiples(root, &title, &key, "nodes alive (count)", report, &panels)
}

/// `c` mixed half with white: the panels' totals, under the families.
fn pale(c: RGBColor) -> RGBColor {
    let mix = |v: u8| ((u16::from(v) + 255) / 2) as u8;
    RGBColor(mix(c.0), mix(c.1), mix(c.2))
}

/// A title, a key strip explaining the line styles, then one panel per
/// entry of `panels` (captioned with its name), on a shared time axis and
/// each on its own y scale: one strategy's peak must not flatten another's
/// curve (read the values off each panel's axis).
fn small_multiples(
    root: &Area<'_>,
    title: &str,
    key: &[Line],
    y_desc: &str,
    report: &SimReport,
    panels: &[(&str, Vec<Line>)],
) -> DrawResult {
    let body = root.titled(title, (SANS, 24))?;
    let (strip, body) = body.split_vertically(30);
    draw_key(&strip, key)?;
    let x_max = x_max(report);
    let frame = |caption, lines: &[Line]| Frame {
        caption,
        caption_size: 18,
        y_desc,
        unit: Unit::Count,
        x_max,
        y_max: y_max(lines.iter(), Unit::Count),
        log_floor: None,
        legend: None,
    };
    if panels.is_empty() {
        return plot(&body, &frame("no strategies", &[]), &[]);
    }
    let cols = (panels.len() as f64).sqrt().ceil() as usize;
    let rows = panels.len().div_ceil(cols);
    for (area, (name, lines)) in body.split_evenly((rows, cols)).iter().zip(panels) {
        plot(area, &frame(name, lines), lines)?;
    }
    Ok(())
}

/// `line`'s legend entry alone (no points).
fn key_entry(line: &Line) -> Line {
    Line {
        label: line.label.clone(),
        points: Vec::new(),
        ..*line
    }
}

/// The legend entries of `key` in one centred row across `strip`.
fn draw_key(strip: &Area<'_>, key: &[Line]) -> DrawResult {
    const MARK: i32 = 24;
    const GAP: i32 = 8;
    const SPACING: i32 = 28;
    let text = TextStyle::from((SANS, 15).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    let mut widths = Vec::with_capacity(key.len());
    for entry in key {
        let (w, _) = strip.estimate_text_size(&entry.label, &text)?;
        widths.push(w as i32);
    }
    let total: i32 = widths.iter().map(|w| MARK + GAP + w).sum::<i32>()
        + SPACING * (key.len() as i32 - 1).max(0);
    let (width, height) = strip.dim_in_pixel();
    let (mut x, y) = ((width as i32 - total).max(0) / 2, height as i32 / 2);
    for (entry, w) in key.iter().zip(widths) {
        strip.draw(&legend_mark(entry.dashed, entry.style(), (x, y)))?;
        strip.draw(&Text::new(entry.label.as_str(), (x + MARK + GAP, y), &text))?;
        x += MARK + GAP + w + SPACING;
    }
    Ok(())
}

/// A 24-pixel sample of a line starting at `at`: two segments, touching
/// when solid, apart when dashed (so both are one type).
fn legend_mark<DB: DrawingBackend>(dashed: bool, style: ShapeStyle, at: BackendPoint) -> Mark<DB> {
    let (a, b) = if dashed {
        ((0, 9), (15, 24))
    } else {
        ((0, 12), (12, 24))
    };
    EmptyElement::at(at)
        + PathElement::new(vec![(a.0, 0), (a.1, 0)], style)
        + PathElement::new(vec![(b.0, 0), (b.1, 0)], style)
}

/// One line per strategy, in presentation order, of `value` over hours.
/// Lines that stay at zero throughout (strategies without spot: no
/// interruptions) drawn one over another hide all but the last: they become
/// one line whose legend names them all.
fn merge_zero_lines(lines: Vec<Line>) -> Vec<Line> {
    let (zero, mut rest): (Vec<Line>, Vec<Line>) = lines
        .into_iter()
        .partition(|l| l.points.iter().all(|&(_, v)| v == 0.0));
    if let Some(first) = zero.first() {
        let names: Vec<&str> = zero.iter().map(|l| l.label.as_str()).collect();
        rest.push(Line {
            label: format!("{}: none", names.join(", ")),
            dashed: zero.len() > 1,
            points: first.points.clone(),
            ..*first
        });
    }
    rest
}

fn strategy_lines(report: &SimReport, value: fn(&Sample) -> f64) -> Vec<Line> {
    ordered(report)
        .into_iter()
        .enumerate()
        .map(|(i, (name, r))| {
            line(
                name,
                strategy_colour(i),
                2,
                false,
                &sorted(&r.timeseries),
                value,
            )
        })
        .collect()
}

fn line(
    label: &str,
    colour: RGBColor,
    width: u32,
    dashed: bool,
    samples: &[&Sample],
    value: impl Fn(&Sample) -> f64,
) -> Line {
    Line {
        label: label.to_string(),
        colour,
        width,
        dashed,
        points: samples
            .iter()
            .map(|s| (s.t_s / 3600.0, value(s)))
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect(),
    }
}

fn sorted(samples: &[Sample]) -> Vec<&Sample> {
    let mut out: Vec<&Sample> = samples.iter().collect();
    out.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
    out
}

fn strategy_colour(i: usize) -> RGBColor {
    STRATEGY_COLOURS[i % STRATEGY_COLOURS.len()]
}

/// Hours shown: the simulated duration or the last sample, at least one.
fn x_max(report: &SimReport) -> f64 {
    let last = report
        .strategies
        .values()
        .flat_map(|r| &r.timeseries)
        .map(|s| s.t_s)
        .filter(|t| t.is_finite())
        .fold(report.duration_s, f64::max);
    let hours = last / 3600.0;
    if hours > 0.0 {
        hours
    } else {
        1.0
    }
}

/// The top of the y axis: the largest value plus room for a legend; for
/// counts a whole number, at least 1.
fn y_max<'a>(lines: impl IntoIterator<Item = &'a Line>, unit: Unit) -> f64 {
    let top = lines
        .into_iter()
        .flat_map(|l| &l.points)
        .map(|&(_, y)| y)
        .fold(0.0, f64::max);
    match unit {
        Unit::Usd if top > 0.0 => top * 1.15,
        Unit::Usd => 1.0,
        Unit::Count => (top * 1.1).ceil().max(top + 1.0),
    }
}

/// Draws axes, `lines` and (if the frame asks) their legend into `area`,
/// on a log y axis from [`Frame::log_floor`] when it has one.
fn plot(area: &Area<'_>, frame: &Frame<'_>, lines: &[Line]) -> DrawResult {
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(frame.caption, (SANS, frame.caption_size))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(80);
    match frame.log_floor {
        Some(floor) => {
            // Values under the floor (a total before its first dollar) sit
            // on the axis.
            let lines: Vec<Line> = lines
                .iter()
                .map(|l| Line {
                    label: l.label.clone(),
                    points: l.points.iter().map(|&(x, y)| (x, y.max(floor))).collect(),
                    ..*l
                })
                .collect();
            let y = (floor..frame.y_max).log_scale();
            let mut chart = builder.build_cartesian_2d(0.0..frame.x_max, y)?;
            draw_lines(&mut chart, frame, &lines)
        }
        None => {
            let mut chart = builder.build_cartesian_2d(0.0..frame.x_max, 0.0..frame.y_max)?;
            draw_lines(&mut chart, frame, lines)
        }
    }
}

/// A chart of `f64` against `f64` (the y axis linear or logarithmic) on
/// an [`Area`].
type Plane<'a, Y> = ChartContext<'a, BitMapBackend<'a>, Cartesian2d<RangedCoordf64, Y>>;

/// The mesh, `lines` and (if the frame asks) their legend on `chart`.
fn draw_lines<Y>(chart: &mut Plane<'_, Y>, frame: &Frame<'_>, lines: &[Line]) -> DrawResult
where
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let y_format = |v: &f64| match frame.unit {
        // Whole dollars once cents stop mattering, to keep labels short.
        Unit::Usd if frame.y_max >= 100.0 => {
            let dollars = super::terminal::usd(v.round());
            dollars.trim_end_matches(".00").to_string()
        }
        Unit::Usd => super::terminal::usd(*v),
        Unit::Count => format!("{v:.0}"),
    };
    // Counts: at most one label per whole number, so none repeats.
    let y_labels = match frame.unit {
        Unit::Usd => 10,
        Unit::Count => (frame.y_max as usize + 1).min(10),
    };
    chart
        .configure_mesh()
        .x_desc("time since start (hours)")
        .y_desc(frame.y_desc)
        .axis_desc_style((SANS, 16))
        .label_style((SANS, 13))
        .y_labels(y_labels)
        .y_label_formatter(&y_format)
        .x_label_formatter(&|v| format!("{v}"))
        .max_light_lines(4)
        .light_line_style(RGBColor(240, 240, 240))
        .draw()?;
    for l in lines {
        let style = l.style();
        // Drop points that land on the previous one's pixel: zero-length
        // segments and sub-pixel zigzags make plotters' thick-line joins
        // spike across the chart.
        let mut points: Vec<(f64, f64)> = Vec::with_capacity(l.points.len());
        let mut last = None;
        for &p in &l.points {
            let pixel = chart.backend_coord(&p);
            if last != Some(pixel) {
                points.push(p);
                last = Some(pixel);
            }
        }
        let series = if l.dashed {
            chart.draw_series(DashedLineSeries::new(points.iter().copied(), 9, 6, style))?
        } else {
            // Segment by segment, so there are no joins to spike.
            chart.draw_series(
                points
                    .windows(2)
                    .map(|w| PathElement::new(vec![w[0], w[1]], style)),
            )?
        };
        let dashed = l.dashed;
        series
            .label(l.label.as_str())
            .legend(move |at| legend_mark(dashed, style, at));
    }
    if let (Some(position), false) = (&frame.legend, lines.is_empty()) {
        draw_series_key(chart, position.clone())?;
    }
    Ok(())
}

/// The series' labels, boxed, at `position` inside the plot.
fn draw_series_key<Y: Ranged<ValueType = f64>>(
    chart: &mut Plane<'_, Y>,
    position: SeriesLabelPosition,
) -> DrawResult {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .label_font((SANS, 14))
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{report, temp_dir};
    use super::*;

    #[test]
    fn strategies_that_stay_at_zero_share_one_line_that_names_them_all() {
        let at = |label: &str, values: &[f64]| Line {
            label: label.into(),
            colour: strategy_colour(0),
            width: 2,
            dashed: false,
            points: values
                .iter()
                .enumerate()
                .map(|(i, &v)| (i as f64, v))
                .collect(),
        };
        let lines = merge_zero_lines(vec![
            at("on-demand", &[0.0, 0.0]),
            at("quartermaster", &[0.0, 3.0]),
            at("static", &[0.0, 0.0]),
        ]);
        let labels: Vec<&str> = lines.iter().map(|l| l.label.as_str()).collect();
        assert_eq!(labels, ["quartermaster", "on-demand, static: none"]);
        assert!(lines[1].dashed);
        // Nothing at zero: nothing merged.
        assert_eq!(merge_zero_lines(vec![at("greedy", &[1.0])]).len(), 1);
    }

    #[test]
    fn charts_render_to_png_bytes_of_the_chart_size() {
        let r = report();
        for (name, draw) in CHARTS {
            let png = render(Path::new(name), |root| draw(&r, root)).unwrap();
            let decoder = png::Decoder::new(std::io::Cursor::new(png));
            let info = decoder.read_info().unwrap();
            assert_eq!(
                (info.info().width, info.info().height),
                (WIDTH, HEIGHT),
                "{name}"
            );
        }
    }

    #[test]
    fn charts_draw_an_empty_report_without_failing() {
        let dir = temp_dir("empty-charts");
        let paths = write_charts(&SimReport::default(), &dir).unwrap();
        assert_eq!(paths.len(), CHARTS.len());
        let _ = std::fs::remove_dir_all(dir);
    }

    fn ending_at(y: f64) -> Line {
        Line {
            label: "x".into(),
            colour: BLACK,
            width: 1,
            dashed: false,
            points: vec![(0.0, 0.0), (1.0, y)],
        }
    }

    #[test]
    fn a_total_that_dwarfs_another_puts_the_cost_axis_on_a_log_scale() {
        // spot-training's seed 7: static's $73,778 against $5,740.
        let lines = [ending_at(5_740.0), ending_at(73_778.0), ending_at(23_668.0)];
        assert_eq!(log_floor(&lines), Some(100.0));
        // Totals within a factor of five share a linear axis from 0.
        assert_eq!(log_floor(&[ending_at(5_740.0), ending_at(23_668.0)]), None);
        assert_eq!(log_floor(&[ending_at(0.0), ending_at(10.0)]), None);
        assert_eq!(log_floor(&[]), None);
    }

    #[test]
    fn families_and_strategies_never_share_a_colour() {
        let all: Vec<RGBColor> = FAMILY_COLOURS
            .iter()
            .chain(&STRATEGY_COLOURS)
            .copied()
            .collect();
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                // Far apart in RGB, not merely unequal.
                let d = (i32::from(a.0) - i32::from(b.0)).abs()
                    + (i32::from(a.1) - i32::from(b.1)).abs()
                    + (i32::from(a.2) - i32::from(b.2)).abs();
                assert!(d > 60, "{a:?} and {b:?}");
            }
        }
    }

    #[test]
    fn count_axes_end_on_a_whole_number_above_the_largest_value() {
        let l = Line {
            label: "x".into(),
            colour: BLACK,
            width: 1,
            dashed: false,
            points: vec![(0.0, 3.0), (1.0, 7.0)],
        };
        assert_eq!(y_max([&l], Unit::Count), 8.0);
        assert_eq!(y_max([], Unit::Count), 1.0);
        assert!((y_max([&l], Unit::Usd) - 8.05).abs() < 1e-9);
    }
}
