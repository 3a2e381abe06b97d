//! Comparing cells: the table, the CSV of learning curves and their plot.

use super::generate::TaskKind;
use super::train::{threshold, TaskResult};

/// The side-by-side table of a comparison of runs at task length `length`, each of at most
/// `steps` steps.
pub fn table(kind: TaskKind, results: &[TaskResult], steps: usize, length: usize) -> String {
    let measure = match threshold(kind) {
        Some((what, t)) => format!("steps until {what} {t}"),
        None => "test accuracy".to_string(),
    };
    let paper = if length == kind.default_length() { "the paper's" } else { "reduced" };
    let mut s = format!("{kind:?}, length {length} ({paper}), at most {steps} steps\n");
    s += &format!("{:<18} {:>28} {:>12} {:>10}\n", "cell", measure, "final loss", "seconds");
    for r in results {
        let m = match (threshold(kind), r.steps_to_threshold, r.test_accuracy) {
            (None, _, Some(a)) => format!("{a:.4}"),
            (Some(_), Some(n), _) => n.to_string(),
            _ => format!("> {steps}"),
        };
        let last = r.curve.last().map_or(f64::NAN, |p| p.loss);
        s.push_str(&format!("{:<18} {:>28} {:>12.5} {:>10.1}\n", r.cell, m, last, r.seconds));
    }
    s
}

/// `step,cell,loss,accuracy` rows of every learning curve.
pub fn curves_csv(results: &[TaskResult]) -> String {
    let mut s = String::from("step,cell,loss,accuracy\n");
    for r in results {
        for p in &r.curve {
            let acc = p.accuracy.map_or(String::new(), |a| format!("{a}"));
            s.push_str(&format!("{},{},{},{}\n", p.step, r.cell, p.loss, acc));
        }
    }
    s
}

/// The learning curves (loss, log scale, against steps), one line per cell, as an SVG image.
pub fn curves_svg(kind: TaskKind, results: &[TaskResult]) -> String {
    let series = results
        .iter()
        .map(|r| crate::render::Series { label: r.cell.clone(), points: r.curve.iter().map(|p| (p.step as f64, p.loss)).collect(), ..Default::default() })
        .collect();
    let panel = crate::render::Panel { title: String::new(), xlabel: "step".into(), ylabel: "training loss (log scale)".into(), log_y: true, series, right: None };
    crate::render::chart(&format!("{kind:?}: training loss"), &[panel], 1)
}

#[cfg(test)]
mod output_tests {
    use super::*;
    use crate::tasks::Point;

    #[test]
    fn table_csv_and_plot_carry_every_cell() {
        let mk = |cell: &str, hit: Option<usize>| TaskResult {
            task: "Addition".into(),
            cell: cell.into(),
            steps_to_threshold: hit,
            test_accuracy: None,
            curve: vec![Point { step: 1, loss: 0.5, accuracy: None }, Point { step: 2, loss: 0.0005, accuracy: None }],
            seconds: 1.0,
            weights: Vec::new(),
        };
        let rs = [mk("gru", Some(2)), mk("lstm", None)];
        let t = table(TaskKind::Addition, &rs, 2, 100);
        assert!(t.contains("steps until loss < 0.001"));
        assert!(t.starts_with("Addition, length 100 (reduced), at most 2 steps"));
        assert!(t.lines().any(|l| l.starts_with("gru") && l.contains(" 2 ")));
        assert!(t.lines().any(|l| l.starts_with("lstm") && l.contains("> 2")));
        let csv = curves_csv(&rs);
        assert_eq!(csv.lines().count(), 5);
        assert!(csv.contains("2,lstm,0.0005,"));
        let svg = curves_svg(TaskKind::Addition, &rs);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains(">lstm</text>"));
    }
}
