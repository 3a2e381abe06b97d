//! Comparing cells: the table, the CSV of learning curves and their plot.

use super::generate::TaskKind;
use super::keep::TaskResult;
use super::config::threshold;

/// The side-by-side table of a comparison of runs at task length `length`, each of at most
/// `steps` steps.
pub fn table(kind: TaskKind, results: &[TaskResult], steps: usize, length: usize) -> String {
    let measure = match threshold(kind) {
        Some((what, t)) => format!("steps until {what} {t}"),
        None => "test accuracy".to_string(),
    };
    let paper = if length == kind.default_length() { "the paper's" } else { "reduced" };
    let mut s = format!("{kind:?}, length {length} ({paper}), at most {steps} steps\n");
    s += &format!("{:<18} {:>28} {:>12} {:>14} {:>10}\n", "cell", measure, "final loss", "final accuracy", "seconds");
    for r in results {
        let m = match (threshold(kind), r.steps_to_threshold, r.test_accuracy) {
            (None, _, Some(a)) => format!("{a:.4}"),
            (Some(_), Some(n), _) => n.to_string(),
            _ => format!("> {steps}"),
        };
        let last = r.curve.last().map_or(f64::NAN, |p| p.loss);
        let acc = r.curve.last().and_then(|p| p.accuracy).map_or("-".to_string(), |a| format!("{a:.4}"));
        s.push_str(&format!("{:<18} {:>28} {:>12.5} {:>14} {:>10.1}\n", r.cell, m, last, acc, r.seconds));
    }
    s.push_str("(final loss and accuracy: the last training batch's)\n");
    for r in results {
        let Some(best) = super::keep::best_eval(&r.evals) else { continue };
        let ended = match r.early_stop {
            Some(st) => format!("stopped at step {st}, no better in the steps after"),
            None => format!("ran to step {}", r.curve.len()),
        };
        s.push_str(&format!("{}: best held-out accuracy {:.4} at step {} of {} evaluations; {ended}\n", r.cell, best.1, best.0, r.evals.len()));
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

/// The learning curves against steps, one line per cell, as an SVG image: the training loss
/// (log scale), and beside it the batch accuracy where the task has one.
pub fn curves_svg(kind: TaskKind, results: &[TaskResult]) -> String {
    let series = |f: &dyn Fn(&super::keep::Point) -> Option<f64>| -> Vec<crate::render::Series> {
        results
            .iter()
            .map(|r| crate::render::Series { label: r.cell.clone(), points: r.curve.iter().filter_map(|p| f(p).map(|y| (p.step as f64, y))).collect(), ..Default::default() })
            .collect()
    };
    let panel = |ylabel: &str, log_y: bool, series| crate::render::Panel { title: String::new(), xlabel: "step".into(), ylabel: ylabel.into(), log_y, series, right: None };
    let mut panels = vec![panel("training loss (log scale)", true, series(&|p| Some(p.loss)))];
    if results.iter().any(|r| r.curve.iter().any(|p| p.accuracy.is_some())) {
        panels.push(panel("training batch accuracy", false, series(&|p| p.accuracy)));
    }
    let title = if panels.len() == 2 { "training loss and accuracy" } else { "training loss" };
    crate::render::chart(&format!("{kind:?}: {title}"), &panels, panels.len())
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
            evals: Vec::new(),
            early_stop: None,
            curve: vec![Point { step: 1, loss: 0.5, accuracy: None }, Point { step: 2, loss: 0.0005, accuracy: None }],
            seconds: 1.0,
            weights: Vec::new(),
            end: None,
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
        // A task with an accuracy gets a second panel with it.
        let with_acc: Vec<TaskResult> = rs.iter().cloned().map(|mut r| { r.curve.iter_mut().for_each(|p| p.accuracy = Some(0.5)); r }).collect();
        let svg = curves_svg(TaskKind::Copy, &with_acc);
        assert_eq!(svg.matches("<polyline").count(), 4);
        assert!(svg.contains("training batch accuracy"));
        assert!(t.contains("final accuracy"));
        assert!(svg.contains(">lstm</text>"));
    }
}
