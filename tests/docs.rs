//! The documentation cannot drift from what produced it.

use std::process::Command;

/// docs/paper.md is what `scripts/paper.sh page` writes from the run records
/// (docs/paper/runs/) and the row notes (docs/paper/notes.json).
#[test]
fn the_papers_page_is_written_from_its_records() {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("python3").args(["scripts/paper.py", "page", "--check"]).current_dir(root).output().expect("python3 runs (the page's script needs it)");
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}
