//! Tests of the configuration built from flags and environment variables.

use super::*;
use clap::Parser;

fn parse(args: &[&str]) -> Result<Config, ConfigError> {
    let mut argv = vec!["mcp-code-sandbox"];
    argv.extend_from_slice(args);
    let cli = crate::cli::Cli::try_parse_from(argv).unwrap();
    Config::from_settings(&cli.settings)
}

#[test]
fn defaults_are_the_documented_ones() {
    let c = parse(&[]).unwrap();
    assert_eq!(c.manager.default_backend, BackendKind::Wasm);
    assert_eq!(c.manager.limits.timeout, Duration::from_secs(30));
    assert_eq!(c.manager.limits.memory_bytes, 512 << 20);
    assert_eq!(c.manager.limits.output_bytes, 16 << 10);
    assert_eq!(c.manager.limits.disk_bytes, 256 << 20);
    assert_eq!(c.manager.max_sandboxes, 64);
    assert_eq!(c.manager.idle_timeout, Some(Duration::from_secs(1800)));
    assert!(!c.wasm.engine.fuel, "fuel metering is off by default");
    assert_eq!(c.manager.limits.fuel, None);
    assert_eq!(
        c.manager.limits.cpu, None,
        "the timeout alone bounds CPU time"
    );
}

#[test]
fn auth_is_off_by_default_and_oauth_needs_its_urls_right() {
    assert!(parse(&[]).unwrap().auth.oauth.is_none());
    let issuer = ["--oauth-issuer", "https://id.example.test"];
    let err = parse(&issuer).unwrap_err().to_string();
    assert!(err.contains("SANDBOX_PUBLIC_URL"), "{err}");
    let c = parse(&[&issuer[..], &["--public-url", "https://sb.example.test/"]].concat()).unwrap();
    let oauth = c.auth.oauth.unwrap();
    assert_eq!(oauth.resource(), "https://sb.example.test/mcp");
    assert_eq!(oauth.scopes, ["sandbox"]);
    let err = parse(&[
        "--oauth-issuer",
        "http://id.example.test",
        "--public-url",
        "https://sb.example.test",
    ])
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("SANDBOX_OAUTH_ISSUER") && err.contains("plain http"),
        "{err}"
    );
    let err = parse(
        &[
            &issuer[..],
            &[
                "--public-url",
                "https://sb.example.test",
                "--oauth-scopes",
                " , ",
            ],
        ]
        .concat(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("SANDBOX_OAUTH_SCOPES"), "{err}");
    let err = parse(&["--oauth-jwks-url", "https://id.example.test/jwks"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("needs SANDBOX_OAUTH_ISSUER"), "{err}");
    let c = parse(&["--auth-tokens-file", "/etc/tokens.toml"]).unwrap();
    assert_eq!(
        c.auth.tokens_file.as_deref(),
        Some(Path::new("/etc/tokens.toml"))
    );
}

fn package_args(index: Option<&str>, pip: Option<&str>, extra: Option<&str>) -> PackageArgs {
    PackageArgs {
        index_url: index.map(str::to_owned),
        pip_index_url: pip.map(str::to_owned),
        pip_extra_index_url: extra.map(str::to_owned),
        ..PackageArgs::default()
    }
}

fn urls(found: Vec<IndexUrl>) -> Vec<String> {
    found.iter().map(|i| i.to_string()).collect()
}

#[test]
fn the_index_comes_from_our_setting_then_pips() {
    let tmp = tempfile::tempdir().unwrap();
    let conf = tmp.path().join("pip.conf");
    std::fs::write(
        &conf,
        "[global]\nindex-url = https://conf.test/simple\nextra-index-url = https://conf-extra.test/simple\n",
    )
    .unwrap();
    let files = vec![tmp.path().join("missing.conf"), conf.clone()];

    let ours = index_urls(
        &package_args(
            Some("https://ours.test/simple"),
            Some("https://pip.test/"),
            None,
        ),
        &files,
    )
    .unwrap();
    assert_eq!(
        urls(ours),
        ["https://ours.test/simple/ (from SANDBOX_INDEX_URL)"]
    );
    let none = index_urls(
        &package_args(Some("none"), Some("https://pip.test/"), None),
        &files,
    )
    .unwrap();
    assert!(none.is_empty(), "\"none\" turns every index off");

    let pip = index_urls(
        &package_args(
            None,
            Some("https://pip.test/simple/"),
            Some("https://x1.test/ https://x2.test/"),
        ),
        &files,
    )
    .unwrap();
    assert_eq!(
        urls(pip),
        [
            "https://pip.test/simple/ (from PIP_INDEX_URL)",
            "https://x1.test/ (from PIP_EXTRA_INDEX_URL)",
            "https://x2.test/ (from PIP_EXTRA_INDEX_URL)"
        ]
    );

    let from_file = urls(index_urls(&package_args(None, None, None), &files).unwrap());
    assert_eq!(from_file.len(), 2);
    assert!(
        from_file[0].starts_with("https://conf.test/simple/ (from index-url in "),
        "{from_file:?}"
    );
    assert!(
        from_file[1].starts_with("https://conf-extra.test/simple/"),
        "{from_file:?}"
    );

    assert!(
        index_urls(&package_args(None, None, None), &[])
            .unwrap()
            .is_empty()
    );
    let err = index_urls(&package_args(Some("ftp://x.test/"), None, None), &[]).unwrap_err();
    assert!(err.to_string().contains("SANDBOX_INDEX_URL"), "{err}");
}

#[test]
fn pip_config_file_null_turns_the_files_off() {
    assert!(pip_conf_files(Some(Path::new("/dev/null"))).is_empty());
    let files = pip_conf_files(Some(Path::new("/tmp/my.conf")));
    assert_eq!(files[0], Path::new("/tmp/my.conf"));
    assert!(files.iter().any(|f| f.ends_with(".pip/pip.conf")));
}

#[test]
fn a_missing_wheelhouse_is_refused_at_start() {
    let args = PackageArgs {
        wheelhouse: Some(PathBuf::from("/nonexistent/wheelhouse")),
        ..PackageArgs::default()
    };
    let err = package_settings(&args, Path::new("/tmp")).unwrap_err();
    assert!(err.to_string().contains("SANDBOX_WHEELHOUSE"), "{err}");
}

#[test]
fn out_of_range_settings_are_refused_with_their_name() {
    let err = parse(&["--timeout-seconds", "500"]).unwrap_err();
    assert!(err.to_string().contains("SANDBOX_TIMEOUT_SECONDS"), "{err}");
    let err = parse(&["--memory-mb", "8"]).unwrap_err();
    assert!(err.to_string().contains("SANDBOX_MEMORY_MB"), "{err}");
    let err = parse(&["--interpreter-type", "docker"]).unwrap_err();
    assert!(err.to_string().contains("INTERPRETER_TYPE"), "{err}");
    let err = parse(&["--interpreter-type", "e2b"]).unwrap_err();
    assert!(err.to_string().contains("E2B_API_KEY"), "{err}");
    assert!(
        parse(&["--fuel", "0"])
            .unwrap()
            .manager
            .limits
            .fuel
            .is_none()
    );
    let metered = parse(&["--fuel", "1000000"]).unwrap();
    assert_eq!(metered.manager.limits.fuel, Some(1_000_000));
    assert!(metered.wasm.engine.fuel);
    let err = parse(&["--cpu-seconds=-1"]).unwrap_err();
    assert!(err.to_string().contains("SANDBOX_CPU_SECONDS"), "{err}");
    assert_eq!(
        parse(&["--cpu-seconds", "2.5"]).unwrap().manager.limits.cpu,
        Some(Duration::from_millis(2500))
    );
    let err = parse(&["--cpu-seconds", "0.001"]).unwrap_err();
    assert!(err.to_string().contains("checked every 10 ms"), "{err}");
    let err = crate::cli::Cli::try_parse_from(["mcp-code-sandbox", "--guest-profiler", "gprof"])
        .unwrap_err();
    assert!(err.to_string().contains("perfmap"), "{err}");
    assert_eq!(
        parse(&["--guest-profiler", "perfmap"])
            .unwrap()
            .wasm
            .profiler,
        GuestProfiler::PerfMap
    );
}

#[test]
fn e2b_settings_follow_the_sdk_variables() {
    assert!(parse(&[]).unwrap().e2b.is_none());
    let c = parse(&["--interpreter-type", "e2b", "--e2b-api-key", "e2b_00ff"]).unwrap();
    assert_eq!(c.manager.default_backend, BackendKind::E2b);
    let e2b = c.e2b.unwrap();
    assert_eq!(e2b.api_url, "https://api.e2b.app");
    assert_eq!(e2b.template, "code-interpreter-v1");
    assert!(e2b.sandbox_url.is_none());
    let c = parse(&[
        "--e2b-api-key",
        "e2b_00ff",
        "--e2b-domain",
        "e2b.example.com",
        "--e2b-sandbox-url",
        "http://127.0.0.1:9/",
    ])
    .unwrap();
    let e2b = c.e2b.unwrap();
    assert_eq!(e2b.api_url, "https://api.e2b.example.com");
    assert_eq!(e2b.sandbox_url.as_deref(), Some("http://127.0.0.1:9"));
    assert!(!format!("{e2b:?}").contains("e2b_00ff"));
    let err = parse(&["--e2b-api-key", "k", "--e2b-api-url", "ftp://x"]).unwrap_err();
    assert!(err.to_string().contains("E2B_API_URL"), "{err}");
    let err = parse(&["--e2b-api-key", "k", "--e2b-domain", "https://e2b.app"]).unwrap_err();
    assert!(err.to_string().contains("E2B_DOMAIN"), "{err}");
}
