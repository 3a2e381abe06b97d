//! The explorer's page, compiled into the binary: nothing is fetched from elsewhere.

pub const INDEX: &str = include_str!("page/index.html");
pub const SCRIPT: &str = include_str!("page/app.js");
pub const STYLE: &str = include_str!("page/app.css");
