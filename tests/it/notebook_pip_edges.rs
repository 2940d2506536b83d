//! pip as notebooks write it, at its edges: an install stopped by the
//! execution's time has ended (nothing left, nothing still writing) when the
//! guest hears "nothing was changed".

use serde_json::{Value, json};

use crate::index_server::IndexServer;
use crate::support::{Server, structured, text};
use crate::wheels::Wheel;

async fn exec(server: &Server, id: &str, code: &str, timeout: u64) -> Value {
    let result = server
        .call(
            "execute_code",
            json!({"session_id": id, "code": code, "timeout_seconds": timeout}),
        )
        .await;
    assert_ne!(result.is_error, Some(true), "{code}\n{}", text(&result));
    structured(&result)
}

fn stream<'a>(got: &'a Value, name: &str) -> &'a str {
    got[name]["text"].as_str().unwrap_or("")
}

#[tokio::test]
async fn an_install_out_of_time_has_ended_when_the_guest_hears_nothing_was_changed() {
    let index = IndexServer::start().await;
    let mut wheel = Wheel::module("manyfiles", "1.0", "");
    for n in 0..6000 {
        wheel = wheel.file(&format!("manyfiles/f{n}.txt"), vec![b'x'; 16 << 10]);
    }
    index.add_wheel(&wheel);
    let server = crate::notebook::server(&index.url, &[]).await;
    let id = server.create_with(json!({})).await;
    // About 1 s for the install (4 s, less the 3 s kept back), far too little
    // to place 6,000 files; right after the answer, the sandbox is looked at.
    let got = exec(
        &server,
        &id,
        "import os\nparent = '/.local/lib/python3.15'\n%pip install manyfiles\nleft = sorted(os.listdir(parent)) if os.path.exists(parent) else []\n[(d, sum(len(f) for _, _, f in os.walk(os.path.join(parent, d)))) for d in left]",
        4,
    )
    .await;
    assert!(
        stream(&got, "stderr").contains("so it was stopped and nothing was changed"),
        "{got}"
    );
    let left = got["value"].as_str().unwrap_or("?");
    assert!(
        left == "[]" || left == "[('site-packages', 0)]",
        "something was left, or still being written: {got}"
    );
}

