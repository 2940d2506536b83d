//! The resolver guests' requests use: it looks a name up once, drops every
//! address the [`AddressPolicy`] refuses, and hands reqwest only the ones
//! left, so the connection goes to an address that was checked (no window
//! for a second, different answer between the check and the connect).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use futures::future::BoxFuture;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::ranges::AddressPolicy;

/// Looks names up (the system's resolver, or a fake in tests).
pub trait Lookup: Send + Sync {
    /// The addresses of `name`.
    fn lookup(&self, name: String) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>>;
}

/// The system's resolver (getaddrinfo, on a blocking thread).
pub struct SystemLookup;

impl Lookup for SystemLookup {
    fn lookup(&self, name: String) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            let found = tokio::net::lookup_host((name.as_str(), 0)).await?;
            Ok(found.map(|a| a.ip()).collect())
        })
    }
}

/// A name whose every address is in a special range.
#[derive(Debug, thiserror::Error)]
#[error(
    "{name} resolves only to addresses a sandbox may not reach ({ranges}); SANDBOX_ALLOW_NETWORKS can allow a range"
)]
pub struct AddressRefused {
    /// The name looked up.
    pub name: String,
    /// Each address and its range.
    pub ranges: String,
}

/// Resolves through `lookup` and keeps what `policy` allows.
#[derive(Clone)]
pub struct CheckedResolver {
    policy: Arc<AddressPolicy>,
    lookup: Arc<dyn Lookup>,
}

impl CheckedResolver {
    /// A resolver checking with `policy`.
    pub fn new(policy: Arc<AddressPolicy>, lookup: Arc<dyn Lookup>) -> Self {
        Self { policy, lookup }
    }

    /// The allowed addresses of `name`, or why there are none.
    pub async fn allowed(&self, name: &str) -> Result<Vec<IpAddr>, AddressRefused> {
        let found = self
            .lookup
            .lookup(name.to_owned())
            .await
            .map_err(|e| AddressRefused {
                name: name.to_owned(),
                ranges: format!("the lookup failed: {e}"),
            })?;
        let mut refused = Vec::new();
        let mut allowed = Vec::new();
        for ip in found {
            match self.policy.check(ip) {
                Ok(()) => allowed.push(ip),
                Err(range) => refused.push(format!("{ip} in {range}")),
            }
        }
        if allowed.is_empty() {
            return Err(AddressRefused {
                name: name.to_owned(),
                ranges: if refused.is_empty() {
                    "no addresses".into()
                } else {
                    refused.join(", ")
                },
            });
        }
        Ok(allowed)
    }
}

impl Resolve for CheckedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let this = self.clone();
        let name = name.as_str().to_owned();
        Box::pin(async move {
            let allowed = this.allowed(&name).await?;
            let addrs: Addrs = Box::new(allowed.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Answers each lookup with the next list of addresses.
    struct Switching(Mutex<Vec<Vec<IpAddr>>>);

    impl Lookup for Switching {
        fn lookup(&self, _name: String) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>> {
            let next = self.0.lock().unwrap().remove(0);
            Box::pin(async move { Ok(next) })
        }
    }

    #[tokio::test]
    async fn each_answer_is_checked_and_special_addresses_never_come_out() {
        let public: IpAddr = "93.184.216.34".parse().unwrap();
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        let metadata: IpAddr = "169.254.169.254".parse().unwrap();
        let lookup = Switching(Mutex::new(vec![
            vec![public],
            vec![loopback],
            vec![metadata, public],
            vec!["::ffff:10.0.0.1".parse().unwrap()],
        ]));
        let resolver = CheckedResolver::new(Arc::default(), Arc::new(lookup));
        assert_eq!(resolver.allowed("a.test").await.unwrap(), vec![public]);
        let err = resolver.allowed("a.test").await.unwrap_err();
        assert!(err.to_string().contains("127.0.0.0/8 (loopback)"), "{err}");
        assert_eq!(
            resolver.allowed("a.test").await.unwrap(),
            vec![public],
            "the special one is dropped"
        );
        assert!(
            resolver.allowed("a.test").await.is_err(),
            "a mapped private address"
        );
    }
}
