//! Tests of the quota gates woven into the runtime's module.

use super::*;
use gate_code::ERRNO_BADF;

/// A module importing the WASI calls it uses and calling fd_write twice.
fn sample() -> Vec<u8> {
    wat_module(
        r#"(module
          (import "wasi_snapshot_preview1" "fd_allocate" (func $alloc (param i32 i64 i64) (result i32)))
          (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
          (import "wasi_snapshot_preview1" "path_open" (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
          (import "wasi_snapshot_preview1" "fd_close" (func $close (param i32) (result i32)))
          (memory (export "memory") 1)
          (func (export "run") (result i32)
            (drop (call $write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
            (call $write (i32.const 3) (i32.const 0) (i32.const 1) (i32.const 8))))"#,
    )
}

fn wat_module(text: &str) -> Vec<u8> {
    wat::parse_str(text).unwrap()
}

#[test]
fn gates_are_appended_and_calls_redirected() {
    let woven = weave(&sample()).unwrap();
    assert_eq!(woven.gated, ["fd_write", "path_open", "fd_close"]);
    assert_eq!(woven.call_sites, 2);
    wasmparser::Validator::new()
        .validate_all(&woven.module)
        .unwrap();
}

#[test]
fn a_module_without_a_door_is_refused() {
    let wasm = wat_module(
        r#"(module (import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32))))"#,
    );
    let err = weave(&wasm).unwrap_err().to_string();
    assert!(err.contains("fd_allocate"), "{err}");
}

#[test]
fn without_fd_allocate_the_gates_ask_through_fd_advise() {
    let wasm = wat_module(
        r#"(module
          (import "wasi_snapshot_preview1" "fd_advise" (func $advise (param i32 i64 i64 i32) (result i32)))
          (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
          (memory (export "memory") 1)
          (func (export "run") (result i32)
            (call $write (i32.const 3) (i32.const 0) (i32.const 1) (i32.const 8))))"#,
    );
    let woven = weave(&wasm).unwrap();
    assert_eq!(woven.door, Door::FdAdvise);
    assert_eq!(woven.gated, ["fd_write"]);

    use wasmtime::{Engine, Linker, Module, Store};
    let engine = Engine::default();
    let module = Module::new(&engine, woven.module).unwrap();
    type Asked = Vec<(i32, i64, i64, i32)>;
    let mut linker: Linker<Asked> = Linker::new(&engine);
    linker
        .func_wrap(
            WASI,
            "fd_advise",
            |mut c: wasmtime::Caller<'_, Asked>, fd: i32, off: i64, len: i64, advice: i32| {
                c.data_mut().push((fd, off, len, advice));
                19
            },
        )
        .unwrap()
        .func_wrap(WASI, "fd_write", |_: i32, _: i32, _: i32, _: i32| 0)
        .unwrap();
    let mut store = Store::new(&engine, Vec::new());
    let instance = linker.instantiate(&mut store, &module).unwrap();
    let memory = instance.get_memory(&mut store, "memory").unwrap();
    memory
        .write(&mut store, 0, &[16, 0, 0, 0, 7, 0, 0, 0])
        .unwrap();
    let run = instance
        .get_typed_func::<(), i32>(&mut store, "run")
        .unwrap();
    assert_eq!(run.call(&mut store, ()).unwrap(), 19);
    assert_eq!(store.data().as_slice(), [(3, ASK_WRITE, 7, 0)]);
}

#[test]
fn a_module_reaching_a_gated_import_other_than_by_a_call_is_refused() {
    let imports = r#"
          (import "wasi_snapshot_preview1" "fd_allocate" (func (param i32 i64 i64) (result i32)))
          (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))"#;
    for (body, how) in [
        (
            "(table 1 funcref) (elem (i32.const 0) funcref (ref.func $write))",
            "in an element segment",
        ),
        (
            "(table 1 funcref) (elem (i32.const 0) $write)",
            "in an element segment",
        ),
        ("(global funcref (ref.func $write))", "in a global"),
        // ref.func in code needs the function declared in a segment first.
        (
            "(elem declare func $write) (func (result funcref) (ref.func $write))",
            "in an element segment",
        ),
        ("(export \"w\" (func $write))", "in an export"),
    ] {
        let wasm = wat_module(&format!("(module {imports} {body})"));
        let err = weave(&wasm).expect_err(body);
        assert!(
            matches!(&err, WeaveError::Indirect { import, how: h } if import == "fd_write" && *h == how),
            "{body}: {err}"
        );
        assert!(
            err.to_string()
                .contains("use a runtime that calls its WASI imports directly"),
            "{err}"
        );
    }
    // A table holding only the module's own functions is fine.
    let wasm = wat_module(&format!(
        "(module {imports} (table 1 funcref) (elem (i32.const 0) funcref (ref.func $own)) (func $own))"
    ));
    assert!(weave(&wasm).is_ok());
}

#[test]
fn a_renumber_from_or_onto_stdio_is_refused_before_reaching_wasi() {
    use wasmtime::{Engine, Linker, Module, Store};
    let wasm = wat_module(
        r#"(module
          (import "wasi_snapshot_preview1" "fd_allocate" (func (param i32 i64 i64) (result i32)))
          (import "wasi_snapshot_preview1" "fd_renumber" (func $renumber (param i32 i32) (result i32)))
          (memory (export "memory") 1)
          (func (export "run") (param i32 i32) (result i32)
            (call $renumber (local.get 0) (local.get 1))))"#,
    );
    let engine = Engine::default();
    let module = Module::new(&engine, weave(&wasm).unwrap().module).unwrap();
    // What reached the host: (door questions, renumbers).
    type Seen = (Vec<(i32, i64)>, Vec<(i32, i32)>);
    let mut linker: Linker<Seen> = Linker::new(&engine);
    linker
        .func_wrap(
            WASI,
            "fd_allocate",
            |mut c: wasmtime::Caller<'_, Seen>, fd: i32, off: i64, _: i64| {
                c.data_mut().0.push((fd, off));
                0
            },
        )
        .unwrap()
        .func_wrap(
            WASI,
            "fd_renumber",
            |mut c: wasmtime::Caller<'_, Seen>, from: i32, to: i32| {
                c.data_mut().1.push((from, to));
                0
            },
        )
        .unwrap();
    let mut store = Store::new(&engine, (Vec::new(), Vec::new()));
    let instance = linker.instantiate(&mut store, &module).unwrap();
    let run = instance
        .get_typed_func::<(i32, i32), i32>(&mut store, "run")
        .unwrap();
    for (from, to) in [(3, 1), (4, 2), (5, 0), (1, 6), (2, 7), (0, 8)] {
        assert_eq!(
            run.call(&mut store, (from, to)).unwrap(),
            ERRNO_BADF,
            "{from} -> {to}"
        );
    }
    assert_eq!(*store.data(), (vec![], vec![]), "nothing reached the host");
    assert_eq!(run.call(&mut store, (4, 5)).unwrap(), 0);
    assert_eq!(
        *store.data(),
        (vec![(4, NOTE_CLOSE), (5, NOTE_CLOSE)], vec![(4, 5)])
    );
}

#[test]
fn the_door_is_fd_allocate_when_a_module_has_both() {
    assert_eq!(
        Door::among(["fd_advise", "fd_allocate"]),
        Some(Door::FdAllocate)
    );
    assert_eq!(Door::among(["fd_write", "fd_advise"]), Some(Door::FdAdvise));
    assert_eq!(Door::among(["fd_write"]), None);
}

#[test]
fn the_gate_asks_the_host_before_writing_and_honours_its_answer() {
    use wasmtime::{Engine, Linker, Module, Store};
    let engine = Engine::default();
    let module = Module::new(&engine, weave(&sample()).unwrap().module).unwrap();
    // (fd, offset, len) of each question; the host refuses writes to fd 3.
    let mut linker: Linker<Vec<(i32, i64, i64)>> = Linker::new(&engine);
    linker
        .func_wrap(
            WASI,
            "fd_allocate",
            |mut c: wasmtime::Caller<'_, Vec<(i32, i64, i64)>>, fd: i32, off: i64, len: i64| {
                c.data_mut().push((fd, off, len));
                if fd == 3 { 19 } else { 0 }
            },
        )
        .unwrap()
        .func_wrap(WASI, "fd_write", |_: i32, _: i32, _: i32, _: i32| 0)
        .unwrap()
        .func_wrap(
            WASI,
            "path_open",
            |_: i32, _: i32, _: i32, _: i32, _: i32, _: i64, _: i64, _: i32, _: i32| 0,
        )
        .unwrap()
        .func_wrap(WASI, "fd_close", |_: i32| 0)
        .unwrap();
    let mut store = Store::new(&engine, Vec::new());
    let instance = linker.instantiate(&mut store, &module).unwrap();
    let memory = instance.get_memory(&mut store, "memory").unwrap();
    // One iovec at address 0: {buf: 16, buf_len: 5}.
    memory
        .write(&mut store, 0, &[16, 0, 0, 0, 5, 0, 0, 0])
        .unwrap();
    let run = instance
        .get_typed_func::<(), i32>(&mut store, "run")
        .unwrap();
    assert_eq!(
        run.call(&mut store, ()).unwrap(),
        19,
        "the refusal is the write's errno"
    );
    // fd 1 was offered to the host (iovecs at 0, one of them), which took
    // it; the gate then reported the 5 bytes as written.
    assert_eq!(
        store.data().as_slice(),
        [(1, WRITE_STDIO, 1), (3, ASK_WRITE, 5)]
    );
    let mut written = [0u8; 4];
    memory.read(&store, 8, &mut written).unwrap();
    assert_eq!(u32::from_le_bytes(written), 5);
}

#[test]
fn a_lone_relative_wait_on_any_clock_becomes_an_absolute_monotonic_one() {
    use wasmtime::{Engine, Linker, Module, Store};
    let wasm = wat_module(
        r#"(module
          (import "wasi_snapshot_preview1" "fd_allocate" (func (param i32 i64 i64) (result i32)))
          (import "wasi_snapshot_preview1" "clock_time_get" (func (param i32 i64 i32) (result i32)))
          (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
          (memory (export "memory") 1)
          (func (export "run") (result i32)
            (call $poll (i32.const 0) (i32.const 64) (i32.const 1) (i32.const 128))))"#,
    );
    let engine = Engine::default();
    let module = Module::new(&engine, weave(&wasm).unwrap().module).unwrap();
    for clock in [1u32, 2, 3] {
        // What poll_oneoff was handed: (clock id, timeout, flags).
        let mut linker: Linker<Option<(u32, u64, u16)>> = Linker::new(&engine);
        linker
            .func_wrap(WASI, "fd_allocate", |_: i32, _: i64, _: i64| 0)
            .unwrap()
            .func_wrap(
                WASI,
                "clock_time_get",
                |mut c: wasmtime::Caller<'_, Option<(u32, u64, u16)>>, id: i32, _: i64, at: i32| {
                    // Only the clocks wasmtime-wasi can wait on answer.
                    if id > 1 {
                        return 28;
                    }
                    let memory = c.get_export("memory").unwrap().into_memory().unwrap();
                    memory
                        .write(&mut c, at as usize, &1_000u64.to_le_bytes())
                        .unwrap();
                    0
                },
            )
            .unwrap()
            .func_wrap(
                WASI,
                "poll_oneoff",
                |mut c: wasmtime::Caller<'_, Option<(u32, u64, u16)>>,
                 subs: i32,
                 _: i32,
                 _: i32,
                 _: i32| {
                    let memory = c.get_export("memory").unwrap().into_memory().unwrap();
                    let mut sub = [0u8; 48];
                    memory.read(&c, subs as usize, &mut sub).unwrap();
                    let id = u32::from_le_bytes(sub[16..20].try_into().unwrap());
                    let timeout = u64::from_le_bytes(sub[24..32].try_into().unwrap());
                    let flags = u16::from_le_bytes(sub[40..42].try_into().unwrap());
                    *c.data_mut() = Some((id, timeout, flags));
                    0
                },
            )
            .unwrap();
        let mut store = Store::new(&engine, None);
        let instance = linker.instantiate(&mut store, &module).unwrap();
        let memory = instance.get_memory(&mut store, "memory").unwrap();
        let mut sub = [0u8; 48];
        sub[16..20].copy_from_slice(&clock.to_le_bytes());
        sub[24..32].copy_from_slice(&5_000u64.to_le_bytes());
        memory.write(&mut store, 0, &sub).unwrap();
        let run = instance
            .get_typed_func::<(), i32>(&mut store, "run")
            .unwrap();
        assert_eq!(run.call(&mut store, ()).unwrap(), 0);
        assert_eq!(
            *store.data(),
            Some((1, 6_000, 1)),
            "clock {clock}: now (1000) plus the timeout (5000) on the monotonic clock, ABSTIME set"
        );
    }
}
