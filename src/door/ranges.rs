//! The address ranges a guest's request may not reach: loopback, private,
//! link-local, multicast, unspecified, documentation, CGNAT, benchmarking,
//! reserved, and the IPv6 forms that carry such an IPv4 address (mapped,
//! compatible, NAT64, 6to4), unless `SANDBOX_ALLOW_NETWORKS` lists the range.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// IPv4 ranges no guest reaches by default, with their names.
const SPECIAL_V4: &[(&str, &str)] = &[
    ("0.0.0.0/8", "this network (unspecified)"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "shared address space (CGNAT)"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "IETF protocol assignments"),
    ("192.0.2.0/24", "documentation"),
    ("192.88.99.0/24", "6to4 relay anycast"),
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
];

/// IPv6 ranges no guest reaches by default, with their names (the forms
/// that embed an IPv4 address are judged by that address first).
const SPECIAL_V6: &[(&str, &str)] = &[
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("::ffff:0:0:0/96", "IPv4-translated (SIIT)"),
    ("64:ff9b:1::/48", "local-use NAT64"),
    ("100::/64", "discard-only"),
    ("2001::/23", "IETF protocol assignments"),
    ("2001:db8::/32", "documentation"),
    ("fc00::/7", "unique local (private)"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local"),
    ("ff00::/8", "multicast"),
];

/// Why an address may not be reached: the range it is in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecialRange {
    /// The range, e.g. `127.0.0.0/8`.
    pub net: String,
    /// Its name, e.g. `loopback`.
    pub name: &'static str,
}

impl std::fmt::Display for SpecialRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.net, self.name)
    }
}

/// The addresses a guest may reach: every address outside the special
/// ranges, and those inside the networks allowed.
#[derive(Clone, Debug, Default)]
pub struct AddressPolicy {
    allowed: Vec<IpNet>,
}

impl AddressPolicy {
    /// A policy that also allows `networks` (`SANDBOX_ALLOW_NETWORKS`).
    pub fn new(networks: Vec<IpNet>) -> Self {
        Self { allowed: networks }
    }

    /// The networks allowed beyond the ordinary ones.
    pub fn networks(&self) -> &[IpNet] {
        &self.allowed
    }

    /// `Ok` when `ip` may be reached; otherwise the special range it is in.
    pub fn check(&self, ip: IpAddr) -> Result<(), SpecialRange> {
        let ip = ip.to_canonical();
        if self.allowed.iter().any(|net| net.contains(&ip)) {
            return Ok(());
        }
        match special(ip) {
            None => Ok(()),
            Some(range) => Err(range),
        }
    }
}

/// The special range `ip` is in, if any; an IPv6 address that embeds an
/// IPv4 one is also judged by it.
fn special(ip: IpAddr) -> Option<SpecialRange> {
    match ip {
        IpAddr::V4(v4) => find(SPECIAL_V4, IpAddr::V4(v4)),
        IpAddr::V6(v6) => {
            if let Some(inner) = embedded_v4(v6)
                && let Some(mut range) = special(IpAddr::V4(inner))
            {
                range.name = "an IPv6 form of a special IPv4 address";
                return Some(range);
            }
            find(SPECIAL_V6, IpAddr::V6(v6))
        }
    }
}

fn find(table: &[(&str, &'static str)], ip: IpAddr) -> Option<SpecialRange> {
    table.iter().find_map(|(net, name)| {
        let parsed: IpNet = net.parse().ok()?;
        parsed.contains(&ip).then(|| SpecialRange {
            net: (*net).to_owned(),
            name,
        })
    })
}

/// The IPv4 address inside an IPv4-mapped, IPv4-compatible, NAT64
/// (64:ff9b::/96) or 6to4 (2002::/16) address.
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if s[..5] == [0; 5]
        && (s[5] == 0xffff || s[5] == 0)
        && v6 != Ipv6Addr::UNSPECIFIED
        && v6 != Ipv6Addr::LOCALHOST
    {
        return Some(low);
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(low);
    }
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new(
            (s[1] >> 8) as u8,
            s[1] as u8,
            (s[2] >> 8) as u8,
            s[2] as u8,
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(policy: &AddressPolicy, ip: &str) -> bool {
        policy.check(ip.parse().unwrap()).is_err()
    }

    #[test]
    fn every_special_range_is_refused_and_public_addresses_pass() {
        let policy = AddressPolicy::default();
        for ip in [
            "0.0.0.0",
            "10.1.2.3",
            "100.64.0.1",
            "127.0.0.1",
            "127.255.255.254",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.0.0.8",
            "192.0.2.1",
            "192.88.99.1",
            "192.168.1.1",
            "198.18.0.1",
            "198.51.100.7",
            "203.0.113.9",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "::ffff:0:7f00:1",
            "64:ff9b:1::7f00:1",
            "2002:7f00:1::1",
            "2002:c0a8:101::",
            "100::1",
            "2001:db8::1",
            "2001::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
        ] {
            assert!(refused(&policy, ip), "{ip} must be refused");
        }
        for ip in [
            "1.1.1.1",
            "8.8.4.4",
            "93.184.216.34",
            "2606:4700::1111",
            "2002:0808:0808::1",
            "::ffff:8.8.8.8",
        ] {
            assert!(!refused(&policy, ip), "{ip} is public");
        }
    }

    #[test]
    fn an_allowed_network_opens_its_range_and_only_it() {
        let policy = AddressPolicy::new(vec!["127.0.0.1/32".parse().unwrap()]);
        assert!(!refused(&policy, "127.0.0.1"));
        assert!(
            !refused(&policy, "::ffff:127.0.0.1"),
            "the mapped form is the same address"
        );
        assert!(refused(&policy, "127.0.0.2"));
        assert!(refused(&policy, "::1"));
        let err = AddressPolicy::default()
            .check("127.0.0.1".parse().unwrap())
            .unwrap_err();
        assert_eq!(err.to_string(), "127.0.0.0/8 (loopback)");
    }
}
