//! Threads as notebook code uses them, across cells, over MCP in a scientific
//! sandbox: a thread nothing waits for stays queued (a heartbeat never turns a
//! finished cell into a timeout), a consumer started in one cell and fed and
//! joined in the next sees what it was fed, a worker that ends up waiting on
//! an empty queue stops quietly, and each queued thread is noted once. And
//! display() of bytes that are no image says so.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Server, scientific_cache, structured, text};

async fn server() -> Server {
    scientific_cache();
    Server::start_with(&[
        ("SANDBOX_RUNTIME", "scientific"),
        ("SANDBOX_POOL_SIZE", "0"),
    ])
    .await
}

/// Runs a cell with a short deadline; the result must not be an error.
async fn cell(server: &Server, id: &str, code: &str) -> Value {
    let result = server
        .call(
            "execute_code",
            json!({"session_id": id, "code": code, "timeout_seconds": 20}),
        )
        .await;
    assert_ne!(result.is_error, Some(true), "{code}\n{}", text(&result));
    structured(&result)
}

/// Runs a cell that must succeed well before its deadline (a wait that
/// hangs would take it all): within `seconds`.
async fn quick_cell(server: &Server, id: &str, code: &str, seconds: u64) -> Value {
    let started = Instant::now();
    let got = cell(server, id, code).await;
    assert!(
        started.elapsed() < Duration::from_secs(seconds),
        "{:?}",
        started.elapsed()
    );
    got
}

fn stream<'a>(got: &'a Value, name: &str) -> &'a str {
    got[name]["text"].as_str().unwrap_or("")
}

#[tokio::test]
async fn a_thread_nothing_waits_for_stays_queued_and_the_cell_ends() {
    let server = server().await;
    let id = server.create_with(json!({})).await;
    let got = quick_cell(
        &server,
        &id,
        "import threading, time\ndef beat():\n    while True:\n        time.sleep(0.2)\nthreading.Thread(target=beat).start()\nx = 42\nprint('started')",
        15,
    )
    .await;
    assert_eq!(stream(&got, "stdout"), "started\n", "{got}");
    assert!(
        stream(&got, "stderr").contains("[1 thread(s) started and not run yet (Thread-")
            && stream(&got, "stderr").contains(" (beat))"),
        "{got}"
    );

    // The state is kept, and the note is not repeated.
    let got = cell(&server, &id, "x").await;
    assert_eq!(got["value"], "42", "{got}");
    assert_eq!(stream(&got, "stderr"), "", "{got}");
}

#[tokio::test]
async fn a_consumer_started_in_one_cell_sees_what_the_next_cell_feeds_it() {
    let server = server().await;
    let id = server.create_with(json!({})).await;
    let got = cell(
        &server,
        &id,
        "import threading, queue\nq = queue.Queue(); seen = []\ndef consumer():\n    while True:\n        x = q.get()\n        if x is None: break\n        seen.append(x)\nt = threading.Thread(target=consumer); t.start()\nprint('consumer started')",
    )
    .await;
    assert_eq!(stream(&got, "stdout"), "consumer started\n", "{got}");
    assert!(!stream(&got, "stderr").contains("Traceback"), "{got}");
    let got = cell(
        &server,
        &id,
        "for i in range(3): q.put(i)\nq.put(None)\nt.join()\nseen, t.is_alive()",
    )
    .await;
    assert_eq!(got["value"], "([0, 1, 2], False)", "{got}");
}

#[tokio::test]
async fn a_worker_left_waiting_on_an_empty_queue_stops_quietly_and_join_says_why() {
    let server = server().await;
    let id = server.create_with(json!({})).await;
    // The queue example of Python's own documentation.
    let got = cell(
        &server,
        &id,
        "import threading, queue\nq = queue.Queue()\ndef worker():\n    while True:\n        item = q.get()\n        q.task_done()\nw = threading.Thread(target=worker, daemon=True)\nw.start()\nfor item in range(5):\n    q.put(item)\nq.join()\nprint('All work completed')",
    )
    .await;
    assert_eq!(stream(&got, "stdout"), "All work completed\n", "{got}");
    let stderr = stream(&got, "stderr");
    assert!(
        !stderr.contains("Traceback") && !stderr.contains("Exception in thread"),
        "{got}"
    );
    assert!(
        stderr.contains("wait forever for an item in an empty queue"),
        "{got}"
    );

    // Alive, as in CPython; joining it would wait forever, so it says so.
    let result = server
        .call(
            "execute_code",
            json!({"session_id": id, "code": "print(w.is_alive())\nw.join()", "timeout_seconds": 20}),
        )
        .await;
    let got = structured(&result);
    assert_eq!(stream(&got, "stdout"), "True\n", "{got}");
    assert_eq!(got["error"]["name"], "NeedsAnotherThread", "{got}");
    assert!(
        got["error"]["value"]
            .as_str()
            .unwrap_or("")
            .contains(" (worker) to end"),
        "{got}"
    );
    assert!(!stream(&got, "stderr").contains("stopped where"), "{got}");
}

#[tokio::test]
async fn a_queued_daemon_thread_is_noted_once_and_a_later_wait_runs_its_own_cell_first() {
    let server = server().await;
    let id = server.create_with(json!({})).await;
    let got = cell(
        &server,
        &id,
        "import threading\nthreading.Thread(target=print, args=('daemon ran',), daemon=True).start()",
    )
    .await;
    assert!(
        stream(&got, "stderr").contains("1 thread(s) started and not run yet"),
        "{got}"
    );
    let got = cell(&server, &id, "1 + 1").await;
    assert_eq!(stream(&got, "stderr"), "", "{got}");

    // A wait in a later cell runs that cell's thread, which satisfies it.
    let got = cell(
        &server,
        &id,
        "done = threading.Event()\nthreading.Thread(target=done.set).start()\ndone.wait()\nprint('set')",
    )
    .await;
    assert_eq!(stream(&got, "stdout"), "set\n", "{got}");
}

#[tokio::test]
async fn display_of_bytes_that_are_no_image_says_so_and_html_with_svg_is_no_image() {
    let server = server().await;
    let id = server.create_with(json!({})).await;
    let result = server
        .call(
            "execute_code",
            json!({"session_id": id, "code": "from IPython.display import display\ndisplay({'image/png': b'not a png at all'}, raw=True)\ndisplay({'image/svg+xml': '<html><script>alert(1)</script><svg></svg></html>'}, raw=True)", "timeout_seconds": 20}),
        )
        .await;
    assert_ne!(result.is_error, Some(true), "{}", text(&result));
    assert!(
        result.content.iter().all(|c| c.as_image().is_none()),
        "{}",
        text(&result)
    );
    let got = structured(&result);
    assert!(
        stream(&got, "stderr")
            .contains("[2 image(s) not returned: their bytes are not a PNG, JPEG or SVG image]"),
        "{got}"
    );
    assert!(!stream(&got, "stderr").contains("at most"), "{got}");
}

#[tokio::test]
async fn raw_locks_simple_queues_asyncio_shutdown_and_thread_contexts_behave_as_in_cpython() {
    let server = server().await;
    let id = server.create_with(json!({})).await;
    // Each line prints what CPython 3.13 prints for it.
    let got = quick_cell(
        &server,
        &id,
        r#"import _thread, queue, threading, asyncio, decimal
lock = _thread.allocate_lock(); lock.acquire()
print(lock.acquire(timeout=0.1))
q = queue.SimpleQueue(); threading.Thread(target=lambda: q.put(1)).start()
print(q.get())
try:
    queue.SimpleQueue().get(timeout=0.1)
except queue.Empty:
    print('empty')
async def main():
    return await asyncio.to_thread(sum, [1, 2])
print(asyncio.run(main()))
print(threading.main_thread().is_alive())
def precise():
    decimal.getcontext().prec = 5
t = threading.Thread(target=precise); t.start(); t.join()
from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor() as pool:
    pool.submit(precise).result()
print(decimal.Decimal(1) / 7)
from multiprocessing.pool import ThreadPool
print(*(f'{c.__module__}.{c.__qualname__}' for c in (ThreadPoolExecutor, ThreadPool)))
work = queue.Queue()
def worker():
    while True:
        try:
            if work.get() is None:
                break
            work.task_done()
        except Exception as e:
            print('swallowed', type(e).__name__)
threading.Thread(target=worker, daemon=True).start()
for i in range(3):
    work.put(i)
work.join()
print('joined')"#,
        15,
    )
    .await;
    assert_eq!(
        stream(&got, "stdout"),
        "False\n1\nempty\n3\nTrue\n0.1428571428571428571428571429\n\
         concurrent.futures.thread.ThreadPoolExecutor multiprocessing.pool.ThreadPool\njoined\n",
        "{got}"
    );
    // The interpreter lived through it: the variables are still there.
    let next = cell(&server, &id, "lock.locked(), q.empty()").await;
    assert_eq!(next["value"], "(True, True)", "{next}");
}

#[tokio::test]
async fn a_progress_bar_leaves_no_endless_thread_for_a_later_wait_to_run() {
    let server = server().await;
    let id = server.create_with(json!({})).await;
    let got = quick_cell(
        &server,
        &id,
        "from tqdm import tqdm\nimport queue\ntotal = sum(tqdm(range(3)))\ntry:\n    queue.Queue().get(timeout=0.2)\nexcept queue.Empty:\n    print('empty', total)",
        10,
    )
    .await;
    assert_eq!(stream(&got, "stdout"), "empty 3\n", "{got}");
}

#[tokio::test]
async fn a_running_thread_has_its_own_ident_and_lock_ownership() {
    let server = server().await;
    let id = server.create_with(json!({})).await;
    // What CPython 3.13 prints for the same cell.
    let got = cell(
        &server,
        &id,
        r#"import threading
seen = {}
def look():
    seen['own ident'] = threading.get_ident() == threading.current_thread().ident != threading.main_thread().ident
    seen['threads'] = sorted(t.name for t in threading.enumerate())
t = threading.Thread(target=look, name='worker'); t.start(); t.join()
print(seen)
rlock = threading.RLock(); got = []
with rlock:
    t = threading.Thread(target=lambda: got.append(rlock.acquire(timeout=0.1))); t.start(); t.join()
condition = threading.Condition()
def notify():
    try:
        condition.notify()
    except RuntimeError:
        got.append('not owned')
t = threading.Thread(target=notify); t.start(); t.join()
print(got)"#,
    )
    .await;
    assert_eq!(
        stream(&got, "stdout"),
        "{'own ident': True, 'threads': ['MainThread', 'worker']}\n[False, 'not owned']\n",
        "{got}"
    );
}

#[tokio::test]
async fn a_thread_that_would_block_for_good_runs_none_of_its_code_again() {
    let server = server().await;
    let id = server.create_with(json!({})).await;
    // What CPython 3.13 prints for the same cell: the retrying worker blocks in
    // get() for good, so neither its `except:` nor its `finally` runs again.
    let got = quick_cell(
        &server,
        &id,
        r#"import threading, queue, time, sys, decimal
from concurrent.futures import ThreadPoolExecutor
work = queue.Queue(); seen = []; finished = []
def worker():
    try:
        while True:
            try:
                item = work.get()
                seen.append(item); work.task_done()
            except:
                print('retrying'); time.sleep(0.5)
    finally:
        finished.append(True)
threading.Thread(target=worker, daemon=True).start()
for i in range(3):
    work.put(i)
work.join()
print(seen, finished)
def init():
    decimal.getcontext().prec = 6
with ThreadPoolExecutor(1, initializer=init) as pool:
    print(list(pool.map(lambda _: str(decimal.Decimal(1) / 7), range(2))))
print(decimal.Decimal(1) / 7)
t = threading.Thread(target=lambda: sys.settrace(lambda *a: None)); t.start(); t.join()
print(sys.gettrace())"#,
        15,
    )
    .await;
    assert_eq!(
        stream(&got, "stdout"),
        "[0, 1, 2] []\n['0.142857', '0.142857']\n0.1428571428571428571428571429\nNone\n",
        "{got}"
    );
}

#[tokio::test]
async fn a_worker_may_run_its_own_event_loop_and_a_failing_excepthook_is_printed() {
    let server = server().await;
    let id = server.create_with(json!({})).await;
    // What CPython 3.13 does with the same cell (the notebook way of running a
    // coroutine from code that is itself in a running loop).
    let got = cell(
        &server,
        &id,
        r#"import asyncio, threading
from concurrent.futures import ThreadPoolExecutor
async def inner():
    return 1
async def outer():
    with ThreadPoolExecutor() as pool:
        a = pool.submit(asyncio.run, inner()).result()
    return a, await asyncio.to_thread(asyncio.run, inner())
print(await outer())
def hook(args):
    raise RuntimeError('hook failed')
threading.excepthook = hook
t = threading.Thread(target=lambda: 1 / 0); t.start(); t.join()
print('after join')"#,
    )
    .await;
    assert_eq!(stream(&got, "stdout"), "(1, 1)\nafter join\n", "{got}");
    let stderr = stream(&got, "stderr");
    assert!(
        stderr.starts_with("Exception in threading.excepthook:")
            && stderr.contains("RuntimeError: hook failed"),
        "{got}"
    );
}

#[tokio::test]
async fn a_heartbeat_from_an_earlier_cell_does_not_hang_a_wait_with_a_timeout() {
    let server = server().await;
    let id = server.create_with(json!({})).await;
    cell(
        &server,
        &id,
        "import threading, time, queue\ndef beat():\n    while True:\n        time.sleep(0.2)\nthreading.Thread(target=beat, daemon=True).start()",
    )
    .await;
    // As in CPython: the wait times out; and a producer started in the same
    // cell still feeds a wait with a timeout.
    let got = quick_cell(
        &server,
        &id,
        "try:\n    queue.Queue().get(timeout=0.3)\nexcept queue.Empty:\n    print('empty')\nq = queue.Queue()\nthreading.Thread(target=q.put, args=(7,)).start()\nprint(q.get(timeout=5))",
        10,
    )
    .await;
    assert_eq!(stream(&got, "stdout"), "empty\n7\n", "{got}");
}

#[tokio::test]
async fn polling_a_thread_waits_for_it_as_join_does() {
    let server = server().await;
    let id = server.create_with(json!({})).await;
    // What CPython 3.13 prints for the same cell.
    let got = quick_cell(
        &server,
        &id,
        r#"import threading, time
results = []
def work(n):
    time.sleep(0.05)
    results.append(n * n)
t = threading.Thread(target=work, args=(3,))
t.start()
print("alive after start:", t.is_alive())
while t.is_alive():
    time.sleep(0.1)
print("results:", results)
ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
for x in ts: x.start()
print("active:", threading.active_count())
while threading.active_count() > 1:
    time.sleep(0.05)
print("results:", sorted(results))
for x in [threading.Thread(target=work, args=(i,)) for i in (10, 11)]: x.start()
for x in threading.enumerate():
    if x is not threading.current_thread():
        x.join()
print("results:", sorted(results))
from time import sleep
t = threading.Thread(target=work, args=(7,)); t.start()
while any(x.is_alive() for x in [t]): sleep(0.01)
print("results:", sorted(results))"#,
        15,
    )
    .await;
    assert_eq!(
        stream(&got, "stdout"),
        "alive after start: True\nresults: [9]\nactive: 5\nresults: [0, 1, 4, 9, 9]\n\
         results: [0, 1, 4, 9, 9, 100, 121]\nresults: [0, 1, 4, 9, 9, 49, 100, 121]\n",
        "{got}"
    );
    assert_eq!(stream(&got, "stderr"), "", "{got}");

    // A consumer the main code did not poll is not run by a sleep: it sees
    // what is fed after the sleep, as in CPython.
    let got = quick_cell(
        &server,
        &id,
        r#"import queue
q = queue.Queue()
seen = []
def consume():
    while (item := q.get()) is not None:
        seen.append(item)
c = threading.Thread(target=consume); c.start()
for i in range(3):
    time.sleep(0.01)
    q.put(i)
q.put(None); c.join()
print(seen)"#,
        15,
    )
    .await;
    assert_eq!(stream(&got, "stdout"), "[0, 1, 2]\n", "{got}");
}
