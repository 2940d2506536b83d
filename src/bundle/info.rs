//! `bundle.toml`: what a bundle holds, for the server that opens it.

use serde::{Deserialize, Serialize};

/// The file's name.
pub const INFO_FILE: &str = "bundle.toml";

/// What a bundle holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BundleInfo {
    /// The runtime it carries (a manifest name, e.g. `python-3.12`).
    pub runtime: String,
    /// The version of the server that made it.
    pub server_version: String,
    /// The modules imported into the runtime's snapshot when it was
    /// prepared (the compiled snapshot in `modules/` is for these).
    pub preload: Vec<String>,
    /// Whether it has a `wheelhouse/`.
    pub wheelhouse: bool,
}

impl BundleInfo {
    /// The file's text.
    pub fn render(&self) -> String {
        let quote = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
        let preload: Vec<String> = self.preload.iter().map(|m| quote(m)).collect();
        format!(
            "# Made by `mcp-code-sandbox bundle`; use it with `mcp-code-sandbox --bundle DIR`.\nruntime = {}\nserver_version = {}\npreload = [{}]\nwheelhouse = {}\n",
            quote(&self.runtime),
            quote(&self.server_version),
            preload.join(", "),
            self.wheelhouse
        )
    }

    /// Reads the file's text.
    pub fn parse(text: &str) -> Result<Self, toml::de::Error> {
        toml::from_str(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_round_trips() {
        let info = BundleInfo {
            runtime: "python-3.12".into(),
            server_version: "0.1.0".into(),
            preload: vec!["numpy".into(), "matplotlib.pyplot".into()],
            wheelhouse: true,
        };
        assert_eq!(BundleInfo::parse(&info.render()).unwrap(), info);
        assert!(BundleInfo::parse("runtime = 3").is_err());
    }
}
