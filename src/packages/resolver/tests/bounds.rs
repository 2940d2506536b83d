//! The resolver's bounds: work, packages, requirements, cycles.

use super::*;

#[tokio::test]
async fn dependency_explosions_stop_at_the_cap() {
    let mut s = FakeSource::default();
    for i in 0..20 {
        let next = format!("p{}", i + 1);
        s.add(&format!("p{i}-1.0-py3-none-any.whl"), &[next.as_str()]);
    }
    s.add("p20-1.0-py3-none-any.whl", &[]);
    let err = resolve(&s, &["p0"]).await.unwrap_err();
    assert!(
        matches!(err, PackageError::TooManyPackages { limit: 10 }),
        "a chain of 21: {err}"
    );
    // One package asking for a hundred others stops before fetching them all.
    let many: Vec<String> = (0..100).map(|i| format!("q{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    s.add("wide-1.0-py3-none-any.whl", &many);
    let err = resolve(&s, &["wide"]).await.unwrap_err();
    assert!(
        matches!(err, PackageError::TooManyPackages { limit: 10 }),
        "a fan of 100: {err}"
    );
}

/// `installed` holding `bloat 1.0` that requires `dep>=0.{i}` for each
/// `i` below `count` (what a guest can plant in its site-packages).
fn bloated(count: usize) -> HashMap<PackageName, Installed> {
    let mut installed = HashMap::new();
    installed.insert(
        PackageName::from_str("bloat").unwrap(),
        Installed {
            version: Version::from_str("1.0").unwrap(),
            requires_dist: (0..count)
                .map(|i| Requirement::from_str(&format!("dep>=0.{i}")).unwrap())
                .collect(),
            built_in: false,
            compiled: false,
        },
    );
    installed
}

#[tokio::test]
async fn thousands_of_requirements_on_one_package_resolve_in_linear_time() {
    let mut s = FakeSource::default();
    s.add("dep-1.0-py3-none-any.whl", &[]);
    let installed = bloated(40_000);
    let started = std::time::Instant::now();
    let r = resolve_with(&s, &installed, &["bloat"]).await.unwrap();
    let took = started.elapsed();
    assert_eq!(picked(&r), ["bloat 1.0", "dep 1.0"]);
    assert!(
        took < std::time::Duration::from_secs(2),
        "40,000 requirements took {took:?}"
    );
}

#[tokio::test]
async fn the_work_of_one_resolution_is_bounded() {
    let mut s = FakeSource::default();
    s.add("dep-1.0-py3-none-any.whl", &[]);
    let limits = InstallLimits {
        max_resolver_steps: 1000,
        ..InstallLimits::default()
    };
    let err = resolve_within(&s, &bloated(5000), &["bloat"], &limits)
        .await
        .unwrap_err();
    assert!(
        matches!(err, PackageError::TooComplex { limit: 1000 }),
        "{err}"
    );
}

#[tokio::test]
async fn messages_quote_a_bounded_number_of_requirements() {
    let mut s = FakeSource::default();
    let mut many: Vec<String> = (0..200).map(|i| format!("lib<2.0.{i}")).collect();
    many.push("lib>=3".into());
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    s.add("hub-1.0-py3-none-any.whl", &many);
    s.add("lib-1.0-py3-none-any.whl", &[]);
    s.add("lib-3.0-py3-none-any.whl", &[]);
    let err = resolve(&s, &["hub"]).await.unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, PackageError::NoMatchingVersion { .. }),
        "{text}"
    );
    assert!(text.contains("(and 197 more)"), "{text}");
    assert!(text.len() < 1500, "{} bytes: {text}", text.len());
}

#[tokio::test]
async fn a_cycle_terminates() {
    let mut s = FakeSource::default();
    s.add("ping-1.0-py3-none-any.whl", &["pong"]);
    s.add("pong-1.0-py3-none-any.whl", &["ping"]);
    assert_eq!(
        picked(&resolve(&s, &["ping"]).await.unwrap()),
        ["ping 1.0", "pong 1.0"]
    );
}

#[tokio::test]
async fn a_conflict_built_to_make_the_solver_think_stops_at_its_time() {
    // Ten pigeons, nine holes: every pigeon's version h needs hole h, and a
    // hole has one version per pigeon, so no choice fits, and proving it
    // takes the solver exponential work for a few hundred small files.
    const PIGEONS: usize = 10;
    let mut s = FakeSource::default();
    let all: Vec<String> = (0..PIGEONS).map(|p| format!("pig{p}")).collect();
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    s.add("php-1.0-py3-none-any.whl", &all);
    for p in 0..PIGEONS {
        for h in 0..PIGEONS - 1 {
            let hole = format!("hole{h}=={}", p + 1);
            s.add(
                &format!("pig{p}-{}.0-py3-none-any.whl", h + 1),
                &[hole.as_str()],
            );
        }
    }
    for h in 0..PIGEONS - 1 {
        for p in 0..PIGEONS {
            s.add(&format!("hole{h}-{}.0-py3-none-any.whl", p + 1), &[]);
        }
    }
    let limits = InstallLimits {
        max_solving: std::time::Duration::from_millis(500),
        ..InstallLimits::default()
    };
    let env = wasi_environment("3.12.0").unwrap();
    let budget = InstallBudget::new(InstallStop::never(), &limits);
    let installed = HashMap::new();
    let resolver = Resolver {
        source: &s,
        env: &env,
        python: PythonMinor {
            major: 3,
            minor: 12,
        },
        python_full: Version::from_str("3.12.0").unwrap(),
        installed: &installed,
        max_packages: 100,
        budget: &budget,
        progress: &|_| {},
    };
    let started = std::time::Instant::now();
    let err = resolver.resolve(&reqs(&["php"])).await.unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(err, PackageError::TooHardToSolve { .. }),
        "stopped by the solver's time, not by steps or a timeout: {err}"
    );
    assert!(err.to_string().contains("pin the versions"), "{err}");
    assert!(took < std::time::Duration::from_secs(10), "{took:?}");
}
