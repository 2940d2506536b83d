//! Tests of the sandbox manager: ids, counts, expiry and the calls to one sandbox.

use super::*;
use crate::sandbox::CodeInterpreter;

/// A backend whose creations panic, or never finish.
struct Failing {
    hang: bool,
}

#[async_trait::async_trait]
impl Backend for Failing {
    fn kind(&self) -> BackendKind {
        BackendKind::Wasm
    }

    async fn create(&self, _spec: SandboxSpec) -> Result<Box<dyn CodeInterpreter>, SandboxError> {
        if self.hang {
            std::future::pending::<()>().await;
        }
        panic!("the backend broke")
    }

    fn default_runtime(&self) -> String {
        "none".into()
    }
}

fn manager(hang: bool) -> Arc<SandboxManager> {
    let limits = SandboxLimits {
        timeout: Duration::from_secs(1),
        max_timeout: Duration::from_secs(1),
        memory_bytes: 1 << 26,
        fuel: None,
        cpu: None,
        output_bytes: 1024,
        output_file_bytes: 1024,
        disk_bytes: 1 << 20,
        disk_files: 10,
        image_bytes: 4096,
        max_images: 1,
        open_files: 16,
    };
    let settings = ManagerSettings {
        default_backend: BackendKind::Wasm,
        limits,
        max_memory_bytes: 1 << 27,
        max_sandboxes: 1,
        idle_timeout: None,
    };
    SandboxManager::new(settings, vec![Arc::new(Failing { hang })])
}

fn request(id: &str) -> CreateRequest {
    CreateRequest {
        id: Some(id.into()),
        ..CreateRequest::default()
    }
}

#[tokio::test]
async fn a_creation_that_panics_or_is_dropped_gives_its_id_and_place_back() {
    let panics = manager(false);
    let task = tokio::spawn({
        let m = panics.clone();
        async move { m.create(request("a")).await.map(|_| ()) }
    });
    assert!(task.await.unwrap_err().is_panic());
    assert!(
        lock(&panics.slots).reserved.is_empty(),
        "the id is free again"
    );

    let hangs = manager(true);
    let task = tokio::spawn({
        let m = hangs.clone();
        async move { m.create(request("b")).await.map(|_| ()) }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let full = hangs.create(request("c")).await.err().unwrap();
    assert!(matches!(full, SandboxError::TooManySandboxes(1)), "{full}");
    task.abort();
    let _ = task.await;
    assert!(
        lock(&hangs.slots).reserved.is_empty(),
        "the place is free again"
    );
}

#[test]
fn ids_are_checked() {
    for ok in ["a", "sb-123", "My_Session.1", &"x".repeat(64)] {
        assert!(validate_id(ok).is_ok(), "{ok}");
    }
    for bad in [
        "",
        ".",
        "..",
        "../x",
        "a/b",
        "a b",
        "é",
        &"x".repeat(65),
        ".hidden",
        "a\0",
    ] {
        assert!(validate_id(bad).is_err(), "{bad:?}");
    }
}
