//! [`Owner`]: whose sandboxes a call may see. On stdio (and HTTP without
//! authorization) there is one user, [`Owner::anyone`], and a sandbox's key
//! is its id. Over HTTP with authorization every principal has its own name
//! space: its sandbox `x` is stored under a key made of a tag of its name and
//! `x`, so another principal naming `x` names a different sandbox, and the
//! answer it gets is the one for a sandbox that does not exist.

use std::sync::Arc;

use sha2::{Digest, Sha256};

/// Whose sandboxes a call may see and create.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Owner {
    /// The principal's name and the key prefix derived from it; `None` for
    /// the one user of an unauthenticated server.
    principal: Option<Arc<Principal>>,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Principal {
    name: String,
    /// `p` and 16 hex digits of the name's SHA-256, then `.`: a key prefix
    /// that no client-chosen id can produce for another principal, since
    /// every key of a principal starts with it.
    prefix: String,
}

/// What one principal may hold at once, beside the server-wide caps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OwnerCaps {
    /// Most sandboxes alive (or being created) at once.
    pub max_sandboxes: Option<usize>,
    /// Most memory its sandboxes' caps add up to, in bytes.
    pub max_memory_bytes: Option<u64>,
    /// Most disk its sandboxes' quotas add up to, in bytes.
    pub max_disk_bytes: Option<u64>,
}

impl Owner {
    /// The one user of a server without authorization: keys are ids.
    pub fn anyone() -> Self {
        Self::default()
    }

    /// An authenticated principal.
    pub fn principal(name: &str) -> Self {
        let digest = Sha256::digest(name.as_bytes());
        let prefix = format!("p{}.", crate::digest::hex(&digest[..8]));
        Self {
            principal: Some(Arc::new(Principal {
                name: name.to_owned(),
                prefix,
            })),
        }
    }

    /// The principal's name, if any (for logs).
    pub fn name(&self) -> Option<&str> {
        self.principal.as_deref().map(|p| p.name.as_str())
    }

    /// The key the sandbox `id` of this owner is stored under.
    pub fn key(&self, id: &str) -> String {
        match &self.principal {
            None => id.to_owned(),
            Some(p) => format!("{}{id}", p.prefix),
        }
    }

    /// The id of a sandbox stored under `key`, if it is this owner's.
    pub fn id_of<'k>(&self, key: &'k str) -> Option<&'k str> {
        match &self.principal {
            None => Some(key),
            Some(p) => key.strip_prefix(p.prefix.as_str()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principals_have_separate_name_spaces() {
        let alice = Owner::principal("alice");
        let bob = Owner::principal("bob");
        assert_ne!(alice.key("x"), bob.key("x"));
        assert_eq!(alice.id_of(&alice.key("x")), Some("x"));
        assert_eq!(bob.id_of(&alice.key("x")), None);
        // Bob naming Alice's key as an id gets a key of his own.
        let forged = alice.key("x");
        assert_ne!(bob.key(&forged), forged);
        assert_eq!(bob.id_of(&bob.key(&forged)), Some(forged.as_str()));
    }

    #[test]
    fn without_authorization_keys_are_ids() {
        let anyone = Owner::anyone();
        assert_eq!(anyone.key("sb-1"), "sb-1");
        assert_eq!(anyone.id_of("sb-1"), Some("sb-1"));
        assert_eq!(anyone.name(), None);
    }
}
