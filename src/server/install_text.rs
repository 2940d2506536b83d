//! What `install_package` did, in words.

use crate::sandbox::{InstallReport, PackageSource};

/// What `install_package` did, in words.
pub fn install_message(report: &InstallReport) -> String {
    let mut message = String::new();
    if report.installed.is_empty() {
        message.push_str("Nothing new to install");
    } else {
        message.push_str("Installed ");
        message.push_str(
            &report
                .installed
                .iter()
                .map(|p| {
                    let mut about: Vec<String> = p
                        .source
                        .map(|s| source_name(s).to_owned())
                        .into_iter()
                        .collect();
                    if let Some(built_in) = &p.replaces_built_in {
                        about.push(format!(
                            "in place of the built-in {built_in}, in this sandbox only"
                        ));
                    }
                    if about.is_empty() {
                        format!("{} {}", p.name, p.version)
                    } else {
                        format!("{} {} ({})", p.name, p.version, about.join("; "))
                    }
                })
                .collect::<Vec<_>>()
                .join(", "),
        );
    }
    if !report.already_present.is_empty() {
        message.push_str("; already present: ");
        message.push_str(
            &report
                .already_present
                .iter()
                .map(|p| match p.source {
                    Some(PackageSource::Runtime) => {
                        format!("{} {} (built into the runtime)", p.name, p.version)
                    }
                    _ => format!("{} {}", p.name, p.version),
                })
                .collect::<Vec<_>>()
                .join(", "),
        );
    }
    message.push('.');
    if !report.import_failures.is_empty() {
        message.push_str(" But importing them fails in this sandbox: ");
        message.push_str(
            &report
                .import_failures
                .iter()
                .map(|f| format!("`import {}` raised {}", f.module, f.error))
                .collect::<Vec<_>>()
                .join("; "),
        );
        message.push_str(
            " (pure-Python packages may still need what this runtime lacks: another version, or a package with compiled code).",
        );
    } else if !report.installed.is_empty() {
        message.push_str(" Import them now; no restart is needed.");
    }
    if let Some(notes) = &report.output {
        message.push('\n');
        message.push_str(notes);
    }
    message
}

/// Where an installed package came from, in words.
fn source_name(source: PackageSource) -> &'static str {
    match source {
        PackageSource::Cache => "from the download cache",
        PackageSource::Index => "from the index",
        PackageSource::Wheelhouse => "from the wheelhouse",
        PackageSource::Remote => "in the remote sandbox",
        PackageSource::Runtime => "built into the runtime",
    }
}
