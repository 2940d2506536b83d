//! An instance's mutable globals, read and written by the host between turns:
//! the code module exports each under wizer's name (`__wizer_global_N`, see
//! [`super::code_module`]), so they and the linear memory are the whole of
//! a turn-driven instance's state.

use serde::{Deserialize, Serialize};
use wasmtime::{Instance, Store, Val};

use super::guest_state::GuestState;
use super::state_error::StateError;

/// The prefix of the exports that name an instance's mutable globals.
const GLOBAL_PREFIX: &str = "__wizer_global_";

/// One mutable global's value, as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum GlobalValue {
    I32(i32),
    I64(i64),
    F32(u32),
    F64(u64),
}

/// The values of `instance`'s exported mutable globals, in export order.
pub(crate) fn capture_globals(
    store: &mut Store<GuestState>,
    instance: &Instance,
) -> Result<Vec<(String, GlobalValue)>, StateError> {
    let names: Vec<String> = instance
        .exports(&mut *store)
        .filter(|e| e.name().starts_with(GLOBAL_PREFIX))
        .map(|e| e.name().to_owned())
        .collect();
    let mut globals = Vec::with_capacity(names.len());
    for name in names {
        let global = instance
            .get_global(&mut *store, &name)
            .ok_or_else(|| StateError::NotAGlobal(name.clone()))?;
        let value = match global.get(&mut *store) {
            Val::I32(v) => GlobalValue::I32(v),
            Val::I64(v) => GlobalValue::I64(v),
            Val::F32(v) => GlobalValue::F32(v),
            Val::F64(v) => GlobalValue::F64(v),
            other => {
                return Err(StateError::Uncopyable {
                    name,
                    kind: format!("{other:?}"),
                });
            }
        };
        globals.push((name, value));
    }
    Ok(globals)
}

/// Sets `instance`'s globals to `globals`.
pub(crate) fn restore_globals(
    store: &mut Store<GuestState>,
    instance: &Instance,
    globals: &[(String, GlobalValue)],
) -> Result<(), StateError> {
    for (name, value) in globals {
        let global = instance
            .get_global(&mut *store, name)
            .ok_or_else(|| StateError::NoSuchGlobal(name.clone()))?;
        let value = match *value {
            GlobalValue::I32(v) => Val::I32(v),
            GlobalValue::I64(v) => Val::I64(v),
            GlobalValue::F32(v) => Val::F32(v),
            GlobalValue::F64(v) => Val::F64(v),
        };
        global
            .set(&mut *store, value)
            .map_err(|e| StateError::CannotSet {
                name: name.clone(),
                reason: e.to_string(),
            })?;
    }
    Ok(())
}
