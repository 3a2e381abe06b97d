//! Records the compiler's version for `rnnlens bench`'s header (empty if it cannot be asked).

fn main() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = std::process::Command::new(rustc)
        .arg("-V")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    println!("cargo:rustc-env=RNNLENS_RUSTC_VERSION={version}");
    println!("cargo:rerun-if-changed=build.rs");
}
