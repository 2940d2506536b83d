//! The resolver's cases, on an in-memory index.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;

use super::*;
use crate::packages::environment::wasi_environment;
use crate::packages::project_file::FileLocation;
use crate::packages::settings::InstallLimits;
use crate::packages::stop::InstallStop;
use crate::sandbox::PackageSource;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Mutex;

/// An in-memory index: (file name, metadata text, yanked, requires-python).
#[derive(Default)]
struct FakeSource {
    files: HashMap<String, Vec<(ProjectFile, String)>>,
    local: HashMap<String, Vec<(ProjectFile, String)>>,
    metadata_reads: Mutex<Vec<String>>,
}

impl FakeSource {
    fn add(&mut self, filename: &str, requires: &[&str]) -> &mut ProjectFile {
        self.add_to(false, filename, requires)
    }

    fn add_to(&mut self, local: bool, filename: &str, requires: &[&str]) -> &mut ProjectFile {
        let (name, version) = match filename.parse::<WheelFilename>() {
            Ok(w) => (w.name.to_string(), w.version.to_string()),
            Err(_) => {
                let stem = filename.trim_end_matches(".tar.gz");
                let (n, v) = stem.rsplit_once('-').unwrap();
                (PackageName::from_str(n).unwrap().to_string(), v.to_owned())
            }
        };
        let mut metadata = format!("Name: {name}\nVersion: {version}\n");
        for r in requires {
            metadata.push_str(&format!("Requires-Dist: {r}\n"));
        }
        let file = ProjectFile {
            filename: filename.into(),
            location: FileLocation::Path(PathBuf::from(filename)),
            sha256: None,
            requires_python: None,
            yanked: None,
            metadata: None,
            source: if local {
                PackageSource::Wheelhouse
            } else {
                PackageSource::Index
            },
        };
        let map = if local {
            &mut self.local
        } else {
            &mut self.files
        };
        let list = map.entry(name).or_default();
        list.push((file, metadata));
        &mut list.last_mut().unwrap().0
    }
}

#[async_trait]
impl Source for FakeSource {
    fn local_files(&self, name: &PackageName) -> Vec<ProjectFile> {
        self.local
            .get(name.as_ref())
            .map(|l| l.iter().map(|(f, _)| f.clone()).collect())
            .unwrap_or_default()
    }

    async fn index_files(
        &self,
        name: &PackageName,
    ) -> Result<Option<Arc<Vec<ProjectFile>>>, PackageError> {
        Ok(self
            .files
            .get(name.as_ref())
            .map(|l| Arc::new(l.iter().map(|(f, _)| f.clone()).collect())))
    }

    async fn metadata(
        &self,
        file: &ProjectFile,
        _: &WheelFilename,
    ) -> Result<CoreMetadata, PackageError> {
        self.metadata_reads
            .lock()
            .unwrap()
            .push(file.filename.clone());
        let text = self
            .files
            .values()
            .chain(self.local.values())
            .flatten()
            .find(|(f, _)| f == file)
            .map(|(_, m)| m.clone())
            .unwrap();
        CoreMetadata::parse(&text).map_err(|reason| PackageError::BadMetadata {
            filename: file.filename.clone(),
            reason,
        })
    }

    fn searched(&self) -> String {
        "the test index".into()
    }
}

fn reqs(text: &[&str]) -> Vec<Requirement> {
    text.iter()
        .map(|t| Requirement::from_str(t).unwrap())
        .collect()
}

async fn resolve_with(
    source: &FakeSource,
    installed: &HashMap<PackageName, Installed>,
    wanted: &[&str],
) -> Result<Resolution, PackageError> {
    resolve_within(source, installed, wanted, &InstallLimits::default()).await
}

async fn resolve_within(
    source: &FakeSource,
    installed: &HashMap<PackageName, Installed>,
    wanted: &[&str],
    limits: &InstallLimits,
) -> Result<Resolution, PackageError> {
    let env = wasi_environment("3.12.0").unwrap();
    let budget = InstallBudget::new(InstallStop::never(), limits);
    let resolver = Resolver {
        source,
        env: &env,
        python: PythonMinor {
            major: 3,
            minor: 12,
        },
        python_full: Version::from_str("3.12.0").unwrap(),
        installed,
        max_packages: 10,
        budget: &budget,
        progress: &|_| {},
    };
    resolver.resolve(&reqs(wanted)).await
}

async fn resolve(source: &FakeSource, wanted: &[&str]) -> Result<Resolution, PackageError> {
    resolve_with(source, &HashMap::new(), wanted).await
}

fn picked(r: &Resolution) -> Vec<String> {
    r.packages
        .iter()
        .map(|p| format!("{} {}", p.name, p.version))
        .collect()
}

#[tokio::test]
async fn a_dependency_chain_resolves_to_the_newest_versions() {
    let mut s = FakeSource::default();
    s.add("a-1.0-py3-none-any.whl", &["b>=1"]);
    s.add("a-2.0-py3-none-any.whl", &["b>=2"]);
    s.add("b-1.0-py3-none-any.whl", &[]);
    s.add("b-2.0-py3-none-any.whl", &["c"]);
    s.add("c-0.1-py3-none-any.whl", &[]);
    let r = resolve(&s, &["a"]).await.unwrap();
    assert_eq!(picked(&r), ["a 2.0", "b 2.0", "c 0.1"]);
    let r = resolve(&s, &["A==1.0"]).await.unwrap();
    assert_eq!(picked(&r), ["a 1.0", "b 2.0", "c 0.1"]);
}

#[tokio::test]
async fn markers_and_extras_decide_which_dependencies_count() {
    let mut s = FakeSource::default();
    s.add(
        "app-1.0-py3-none-any.whl",
        &[
            "winonly; sys_platform == 'win32'",
            "wasidep; sys_platform == 'wasi'",
            "old; python_version < '3.8'",
            "fast; extra == 'speed'",
        ],
    );
    s.add("wasidep-1.0-py3-none-any.whl", &[]);
    s.add("fast-1.0-py3-none-any.whl", &[]);
    let r = resolve(&s, &["app"]).await.unwrap();
    assert_eq!(picked(&r), ["app 1.0", "wasidep 1.0"]);
    let r = resolve(&s, &["app[speed]"]).await.unwrap();
    assert_eq!(picked(&r), ["app 1.0", "wasidep 1.0", "fast 1.0"]);
    let r = resolve(&s, &["app", "app[speed]"]).await.unwrap();
    assert_eq!(
        picked(&r),
        ["app 1.0", "wasidep 1.0", "fast 1.0"],
        "an extra asked later still counts"
    );
}

#[tokio::test]
async fn a_later_requirement_restarts_with_the_combined_one() {
    let mut s = FakeSource::default();
    s.add("top-1.0-py3-none-any.whl", &["lib", "other"]);
    s.add("other-1.0-py3-none-any.whl", &["lib<2"]);
    s.add("lib-1.0-py3-none-any.whl", &[]);
    s.add("lib-2.0-py3-none-any.whl", &[]);
    let r = resolve(&s, &["top"]).await.unwrap();
    assert_eq!(picked(&r), ["top 1.0", "lib 1.0", "other 1.0"]);
}

#[tokio::test]
async fn an_impossible_conflict_names_both_sides() {
    let mut s = FakeSource::default();
    s.add("x-1.0-py3-none-any.whl", &["lib>=2"]);
    s.add("lib-1.0-py3-none-any.whl", &[]);
    s.add("lib-2.0-py3-none-any.whl", &[]);
    let err = resolve(&s, &["lib==1.0", "x"]).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, PackageError::Conflict { .. }), "{text}");
    assert!(text.contains("you asked for `lib==1.0`"), "{text}");
    assert!(text.contains("`x 1.0` requires `lib>=2`"), "{text}");
}

#[tokio::test]
async fn yanked_files_are_skipped_unless_pinned() {
    let mut s = FakeSource::default();
    s.add("y-1.0-py3-none-any.whl", &[]);
    s.add("y-2.0-py3-none-any.whl", &[]).yanked = Some("broken".into());
    assert_eq!(picked(&resolve(&s, &["y"]).await.unwrap()), ["y 1.0"]);
    assert_eq!(picked(&resolve(&s, &["y==2.0"]).await.unwrap()), ["y 2.0"]);
    let err = resolve(&s, &["y>1.5"]).await.unwrap_err().to_string();
    assert!(
        err.contains("yanked") && err.contains("broken") && err.contains("y==2.0"),
        "{err}"
    );
}

#[tokio::test]
async fn text_from_the_index_is_quoted_cut() {
    let mut s = FakeSource::default();
    s.add("y-2.0-py3-none-any.whl", &[]).yanked = Some("why ".repeat(50_000));
    let err = resolve(&s, &["y"]).await.unwrap_err().to_string();
    assert!(err.contains("why why"), "{err}");
    assert!(err.len() < 1000, "{} bytes", err.len());
    let mut s = FakeSource::default();
    s.add("r-2.0-py3-none-any.whl", &[]).requires_python =
        Some(format!(">=4{}", ",!=1.0".repeat(20_000)));
    let err = resolve(&s, &["r"]).await.unwrap_err().to_string();
    assert!(err.contains("(Requires-Python "), "{err}");
    assert!(err.len() < 1000, "{} bytes", err.len());
}

#[tokio::test]
async fn pre_releases_only_when_asked_or_alone() {
    let mut s = FakeSource::default();
    s.add("p-1.0-py3-none-any.whl", &[]);
    s.add("p-2.0b1-py3-none-any.whl", &[]);
    s.add("q-1.0rc1-py3-none-any.whl", &[]);
    assert_eq!(picked(&resolve(&s, &["p"]).await.unwrap()), ["p 1.0"]);
    assert_eq!(
        picked(&resolve(&s, &["p>=2.0b1"]).await.unwrap()),
        ["p 2.0b1"]
    );
    assert_eq!(picked(&resolve(&s, &["q"]).await.unwrap()), ["q 1.0rc1"]);
}

#[tokio::test]
async fn finals_that_cannot_be_used_do_not_let_a_pre_release_in() {
    // As pip: a pre-release is a candidate only when asked for or alone, so
    // the failure is about what the finals need, not the beta.
    let mut s = FakeSource::default();
    s.add("p-1.0-py3-none-any.whl", &["native"]);
    s.add("p-2.0-py3-none-any.whl", &["native"]);
    s.add("p-3.0b1-py3-none-any.whl", &[]);
    s.add("native-1.0-cp312-cp312-manylinux_2_17_x86_64.whl", &[]);
    let err = resolve(&s, &["p"]).await.unwrap_err().to_string();
    assert!(err.contains("native"), "{err}");
    assert!(!err.contains("3.0b1"), "{err}");
    assert_eq!(
        picked(&resolve(&s, &["p>=3.0b1"]).await.unwrap()),
        ["p 3.0b1"]
    );
}

#[tokio::test]
async fn a_version_whose_metadata_does_not_parse_is_passed_over() {
    // streamlit 0.42.0, datasets 1.6.2: `tornado (>=5.0<6.0)`.
    let mut s = FakeSource::default();
    s.add("p-1.0-py3-none-any.whl", &[]);
    s.add("p-2.0-py3-none-any.whl", &["tornado (>=5.0<6.0)"]);
    assert_eq!(picked(&resolve(&s, &["p"]).await.unwrap()), ["p 1.0"]);
    let err = resolve(&s, &["p==2.0"]).await.unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, PackageError::UnreadableVersion { .. }),
        "{text}"
    );
    assert!(
        text.contains("p-2.0-py3-none-any.whl") && text.contains(">=5.0<6.0"),
        "{text}"
    );
}

/// `count` versions of `p`, 1.0 up: the newest `needing` need `native`,
/// which has no pure wheel.
fn long_history(count: usize, needing: usize) -> FakeSource {
    let mut s = FakeSource::default();
    for i in 1..=count {
        let requires: &[&str] = if i > count - needing {
            &["native"]
        } else {
            &[]
        };
        s.add(&format!("p-{i}.0-py3-none-any.whl"), requires);
    }
    s.add("native-1.0-cp312-cp312-manylinux_2_17_x86_64.whl", &[]);
    s
}

#[tokio::test]
async fn after_a_long_walk_back_the_refusal_starts_with_the_newest_releases() {
    // streamlit: its newest releases need pyarrow; 0.1 to 0.8 needed motor.
    let mut s = FakeSource::default();
    for i in 1..=5 {
        s.add(&format!("app-0.{i}-py3-none-any.whl"), &["motor"]);
    }
    for i in 1..=5 {
        s.add(&format!("app-{i}.0-py3-none-any.whl"), &["arrow-native"]);
    }
    s.add("motor-3.7-py3-none-any.whl", &["mongo-native"]);
    s.add(
        "arrow_native-1.0-cp312-cp312-manylinux_2_17_x86_64.whl",
        &[],
    );
    s.add(
        "mongo_native-1.0-cp312-cp312-manylinux_2_17_x86_64.whl",
        &[],
    );
    let err = resolve(&s, &["app"]).await.unwrap_err().to_string();
    let first = err.split(": ").nth(1).unwrap_or_default();
    assert!(first.contains("app 5.0"), "{err}");
    let mongo = err.find("mongo-native").unwrap_or(usize::MAX);
    assert!(err.find("arrow-native").unwrap() < mongo, "{err}");
    assert!(
        !err.contains("app 4.0 cannot"),
        "one line for the same reason: {err}"
    );
    assert!(
        err.contains("older releases cannot be used for the same reasons"),
        "{err}"
    );
}

#[tokio::test]
async fn going_back_through_hundreds_of_versions_finds_the_newest_that_works() {
    // openai, anthropic, langchain-core: pip goes back ~300 releases to
    // the last one before a compiled dependency came in.
    let s = long_history(320, 290);
    assert_eq!(picked(&resolve(&s, &["p"]).await.unwrap()), ["p 30.0"]);
    let reads = s.metadata_reads.lock().unwrap().len();
    assert!(
        (291..=291 + MAX_READ_AHEAD).contains(&reads),
        "{reads} reads"
    );
}

#[tokio::test]
async fn past_the_reads_allowed_the_error_names_the_dependency_and_an_older_pin() {
    let s = long_history(MAX_READS_PER_PACKAGE + 20, MAX_READS_PER_PACKAGE + 10);
    let err = resolve(&s, &["p"]).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, PackageError::GaveUp { .. }), "{text}");
    assert!(
        text.contains(&format!("after reading {MAX_READS_PER_PACKAGE}")),
        "{text}"
    );
    assert!(text.contains("native"), "{text}");
    let oldest = 20 + 1;
    assert!(text.contains(&format!("`p<{oldest}.0`")), "{text}");
}

#[tokio::test]
async fn requires_python_excludes_versions_from_the_page_or_the_metadata() {
    let mut s = FakeSource::default();
    s.add("r-1.0-py3-none-any.whl", &[]);
    s.add("r-2.0-py3-none-any.whl", &[]).requires_python = Some(">=3.13".into());
    assert_eq!(picked(&resolve(&s, &["r"]).await.unwrap()), ["r 1.0"]);
    let mut s = FakeSource::default();
    s.add("t-1.0-py3-none-any.whl", &["fine"]);
    let err = resolve(&s, &["t>=2", "missing"]).await.unwrap_err();
    assert!(
        matches!(err, PackageError::NoMatchingVersion { .. }),
        "{err}"
    );
    let mut s = FakeSource::default();
    s.add("only-2.0-py3-none-any.whl", &[]).requires_python = Some(">=4".into());
    let err = resolve(&s, &["only"]).await.unwrap_err().to_string();
    assert!(
        err.contains("Requires-Python >=4") && err.contains("3.12.0"),
        "{err}"
    );
}

#[tokio::test]
async fn native_and_source_only_packages_are_refused_with_reasons() {
    let mut s = FakeSource::default();
    for tag in [
        "cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64",
        "cp312-cp312-win_amd64",
        "cp312-cp312-macosx_11_0_arm64",
        "cp311-cp311-win_amd64",
    ] {
        s.add(&format!("numpy-2.1.0-{tag}.whl"), &[]);
    }
    s.add("numpy-2.1.0.tar.gz", &[]);
    s.add("docopt-0.6.2.tar.gz", &[]);
    s.add("needsnative-1.0-py3-none-any.whl", &["numpy"]);
    let err = resolve(&s, &["numpy"]).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, PackageError::NotPure { .. }), "{text}");
    assert!(
        text.contains("pure-Python wheels") && text.contains("WASI"),
        "{text}"
    );
    assert!(
        text.contains("cp312-cp312-win_amd64"),
        "a sample of tags: {text}"
    );
    assert!(text.contains("source archive"), "{text}");
    let err = resolve(&s, &["docopt"]).await.unwrap_err();
    assert!(matches!(err, PackageError::SdistOnly { .. }), "{err}");
    let text = resolve(&s, &["needsnative"]).await.unwrap_err().to_string();
    assert!(
        text.contains("needed because `needsnative 1.0` requires `numpy`"),
        "{text}"
    );
}

#[tokio::test]
async fn unknown_packages_and_versions_get_their_own_messages() {
    let mut s = FakeSource::default();
    s.add("known-1.0-py3-none-any.whl", &[]);
    let err = resolve(&s, &["nosuchthing"]).await.unwrap_err();
    assert!(matches!(err, PackageError::UnknownPackage { .. }), "{err}");
    let err = resolve(&s, &["known==9"]).await.unwrap_err().to_string();
    assert!(err.contains("==9") && err.contains("1.0"), "{err}");
}

#[tokio::test]
async fn installed_versions_are_kept_when_they_fit() {
    let mut s = FakeSource::default();
    s.add("lib-1.0-py3-none-any.whl", &[]);
    s.add("lib-2.0-py3-none-any.whl", &[]);
    s.add("dep-1.0-py3-none-any.whl", &[]);
    let mut installed = HashMap::new();
    installed.insert(
        PackageName::from_str("lib").unwrap(),
        Installed {
            version: Version::from_str("1.0").unwrap(),
            requires_dist: reqs(&["dep"]),
            built_in: false,
            compiled: false,
        },
    );
    let r = resolve_with(&s, &installed, &["lib"]).await.unwrap();
    assert!(matches!(r.packages[0].choice, Choice::Installed));
    assert_eq!(picked(&r), ["lib 1.0", "dep 1.0"]);
    let r = resolve_with(&s, &installed, &["lib>=2"]).await.unwrap();
    assert!(matches!(r.packages[0].choice, Choice::New { .. }));
    assert_eq!(picked(&r), ["lib 2.0"]);
}

#[tokio::test]
async fn a_compiled_built_in_satisfies_dependencies_and_is_never_replaced() {
    let mut s = FakeSource::default();
    s.add("plotter-1.0-py3-none-any.whl", &["numpy>=2"]);
    s.add("oldplotter-1.0-py3-none-any.whl", &["numpy<2"]);
    s.add("numpy-1.26.0-py3-none-any.whl", &[]);
    let mut installed = HashMap::new();
    installed.insert(
        PackageName::from_str("numpy").unwrap(),
        Installed {
            version: Version::from_str("2.5.2").unwrap(),
            requires_dist: Vec::new(),
            built_in: true,
            compiled: true,
        },
    );
    let r = resolve_with(&s, &installed, &["plotter"]).await.unwrap();
    assert_eq!(picked(&r), ["plotter 1.0", "numpy 2.5.2"]);
    assert!(matches!(r.packages[1].choice, Choice::Installed));
    assert!(
        !r.notes.iter().any(|n| n.contains("Built into")),
        "nothing newer fits: {:?}",
        r.notes
    );
    // A newer pure release that fits: the result says the built-in was kept.
    s.add("numpy-2.6.0-py3-none-any.whl", &[]);
    let r = resolve_with(&s, &installed, &["plotter"]).await.unwrap();
    assert_eq!(picked(&r), ["plotter 1.0", "numpy 2.5.2"]);
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("Built into") && n.contains("numpy 2.5.2 (the index has 2.6.0)")),
        "{:?}",
        r.notes
    );
    let err = resolve_with(&s, &installed, &["oldplotter"])
        .await
        .unwrap_err();
    assert!(matches!(err, PackageError::BuiltIn { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("numpy 2.5.2 is built into") && text.contains("<2"),
        "{text}"
    );
}

#[tokio::test]
async fn a_pure_built_in_is_kept_when_it_fits_and_gives_way_when_it_does_not() {
    let mut s = FakeSource::default();
    s.add("attrs-23.2.0-py3-none-any.whl", &[]);
    s.add("attrs-26.2.0-py3-none-any.whl", &[]);
    s.add("oldschema-1.0-py3-none-any.whl", &["attrs<24"]);
    s.add("newschema-1.0-py3-none-any.whl", &["attrs>=22"]);
    let mut installed = HashMap::new();
    installed.insert(
        PackageName::from_str("attrs").unwrap(),
        Installed {
            version: Version::from_str("26.1.0").unwrap(),
            requires_dist: Vec::new(),
            built_in: true,
            compiled: false,
        },
    );
    let r = resolve_with(&s, &installed, &["newschema"]).await.unwrap();
    assert_eq!(picked(&r), ["newschema 1.0", "attrs 26.1.0"]);
    assert!(matches!(r.packages[1].choice, Choice::Installed));
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("attrs 26.1.0 (the index has 26.2.0)")),
        "the kept built-in is named: {:?}",
        r.notes
    );
    let r = resolve_with(&s, &installed, &["attrs==23.2.0"])
        .await
        .unwrap();
    assert_eq!(picked(&r), ["attrs 23.2.0"]);
    assert!(matches!(r.packages[0].choice, Choice::New { .. }));
    let r = resolve_with(&s, &installed, &["oldschema"]).await.unwrap();
    assert_eq!(
        picked(&r),
        ["oldschema 1.0", "attrs 23.2.0"],
        "a dependency's bound decides too"
    );
    // A built-in asking for attrs is not part of this resolution: like pip,
    // the install goes on and says what it breaks.
    installed.insert(
        PackageName::from_str("jsonschema").unwrap(),
        Installed {
            version: Version::from_str("4.0").unwrap(),
            requires_dist: reqs(&["attrs>=24", "attrs<30; python_version < '3'"]),
            built_in: true,
            compiled: false,
        },
    );
    let r = resolve_with(&s, &installed, &["attrs==23.2.0"])
        .await
        .unwrap();
    assert_eq!(picked(&r), ["attrs 23.2.0"]);
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("jsonschema 4.0 requires `attrs>=24`") && !n.contains("attrs<30")),
        "{:?}",
        r.notes
    );
    let err = resolve_with(&s, &installed, &["attrs==22.1.0"])
        .await
        .unwrap_err();
    assert!(
        !matches!(err, PackageError::BuiltIn { .. }),
        "a pure built-in is not in the way: {err}"
    );
}

#[tokio::test]
async fn the_wheelhouse_is_used_before_the_index() {
    let mut s = FakeSource::default();
    s.add_to(true, "w-1.0-py3-none-any.whl", &[]);
    s.add("w-2.0-py3-none-any.whl", &[]);
    let r = resolve(&s, &["w"]).await.unwrap();
    assert_eq!(picked(&r), ["w 1.0"], "a fitting local wheel wins");
    let r = resolve(&s, &["w>=2"]).await.unwrap();
    assert_eq!(picked(&r), ["w 2.0"], "the index fills in");
}

#[tokio::test]
async fn metadata_that_contradicts_the_file_name_is_refused() {
    let mut s = FakeSource::default();
    s.add("liar-1.0-py3-none-any.whl", &[]);
    s.files.get_mut("liar").unwrap()[0].1 = "Name: other\nVersion: 1.0\n".into();
    let err = resolve(&s, &["liar"]).await.unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(&err, PackageError::UnreadableVersion { .. })
            && text.contains("it says it is other 1.0, but the file name says liar 1.0"),
        "{err}"
    );
    assert!(text.contains("Nothing was installed"), "{err}");
}

#[tokio::test]
async fn a_false_marker_on_a_user_requirement_is_noted() {
    let mut s = FakeSource::default();
    s.add("six-1.0-py3-none-any.whl", &[]);
    let r = resolve(&s, &["six; sys_platform == 'win32'"])
        .await
        .unwrap();
    assert!(r.packages.is_empty());
    assert!(r.notes[0].contains("marker"), "{:?}", r.notes);
}

#[tokio::test]
async fn a_version_whose_dependency_is_compiled_gives_way_to_an_older_pure_one() {
    // As pydantic on PyPI: 2.x needs pydantic-core, which ships only
    // platform wheels; 1.10 is pure Python. pip picks 1.10; so must we.
    let mut s = FakeSource::default();
    s.add(
        "pydantic-2.5.0-py3-none-any.whl",
        &["pydantic-core==2.14.1", "typing-extensions>=4.6"],
    );
    s.add(
        "pydantic-2.4.0-py3-none-any.whl",
        &["pydantic-core==2.10.1"],
    );
    s.add(
        "pydantic-1.10.13-py3-none-any.whl",
        &["typing-extensions>=4.2"],
    );
    s.add(
        "pydantic_core-2.14.1-cp312-cp312-manylinux_2_17_x86_64.whl",
        &[],
    );
    s.add("pydantic_core-2.10.1-cp312-cp312-win_amd64.whl", &[]);
    s.add("typing_extensions-4.9.0-py3-none-any.whl", &[]);
    let r = resolve(&s, &["pydantic"]).await.unwrap();
    assert_eq!(picked(&r), ["pydantic 1.10.13", "typing-extensions 4.9.0"]);
    // Asked for 2.x, it cannot be had, and the message names why.
    let err = resolve(&s, &["pydantic>=2"]).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, PackageError::NotPure { .. }), "{text}");
    assert!(
        text.contains("pydantic-core is needed because `pydantic 2."),
        "{text}"
    );
}

#[tokio::test]
async fn a_required_compiled_dependency_is_refused_by_name() {
    // As polars 2.1.0: a pure wheel whose one required dependency is not.
    let mut s = FakeSource::default();
    s.add(
        "polars-2.1.0-py3-none-any.whl",
        &["polars-runtime-32==2.1.0", "numpy>=1.16; extra == 'numpy'"],
    );
    s.add(
        "polars_runtime_32-2.1.0-cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        &[],
    );
    let err = resolve(&s, &["polars"]).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, PackageError::NotPure { .. }), "{text}");
    assert!(
        text.contains("polars-runtime-32 cannot be installed here")
            && text.contains("needed because `polars 2.1.0` requires `polars-runtime-32==2.1.0`"),
        "{text}"
    );
}

#[tokio::test]
async fn backtracking_finds_the_versions_that_fit_together() {
    let mut s = FakeSource::default();
    s.add("a-1.0-py3-none-any.whl", &["c<2"]);
    s.add("b-1.0-py3-none-any.whl", &["c>=1"]);
    s.add("b-2.0-py3-none-any.whl", &["c>=2"]);
    s.add("c-1.0-py3-none-any.whl", &[]);
    s.add("c-2.0-py3-none-any.whl", &[]);
    let r = resolve(&s, &["a", "b"]).await.unwrap();
    let mut got = picked(&r);
    got.sort();
    assert_eq!(got, ["a 1.0", "b 1.0", "c 1.0"]);
}

#[tokio::test]
async fn a_mix_of_dead_ends_is_explained_in_a_few_lines() {
    let mut s = FakeSource::default();
    // Each version of top is a dead end of its own kind.
    s.add("top-1.0-py3-none-any.whl", &["native"]);
    s.add("top-2.0-py3-none-any.whl", &["gone"]);
    s.add("native-1.0-cp312-cp312-win_amd64.whl", &[]);
    let err = resolve(&s, &["top"]).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, PackageError::NoSolution { .. }), "{text}");
    assert!(text.contains("native") && text.contains("gone"), "{text}");
    assert!(text.len() < 2500, "{} bytes: {text}", text.len());
}

mod bounds;
