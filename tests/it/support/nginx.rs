//! Real nginx (Debian's package) run as a plain process on loopback with its
//! own prefix and configuration in a temporary directory, serving the
//! shipped `deploy/nginx/mcp-code-sandbox.conf` in front of given replicas.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;

/// Where Debian installs nginx, for when `PATH` lacks `/usr/sbin`.
const DEBIAN_NGINX: &str = "/usr/sbin/nginx";

/// A running nginx, stopped when dropped.
pub struct Nginx {
    /// Its address, e.g. `http://127.0.0.1:PORT`.
    pub base: String,
    child: Child,
    dir: TempDir,
}

impl Nginx {
    /// Starts nginx with the shipped configuration, its upstream servers
    /// replaced by `replicas` (`host:port` each, exactly two) and listening
    /// on a free loopback port. Panics, saying how to install it, when nginx
    /// is missing: this test must not pass without it.
    pub fn start(replicas: [&str; 2]) -> Self {
        let binary = find_nginx().unwrap_or_else(|| {
            panic!(
                "nginx is not installed: install Debian's package (apt-get install -y nginx); \
                 tests/install-tools.sh installs it"
            )
        });
        let dir = tempfile::tempdir().unwrap();
        for sub in ["logs", "tmp"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
        }
        let port = free_port();
        let site = site_config(&shipped_config(), replicas, port);
        std::fs::write(dir.path().join("site.conf"), site).unwrap();
        std::fs::write(dir.path().join("nginx.conf"), main_config(dir.path())).unwrap();
        let child = Command::new(&binary)
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(dir.path().join("nginx.conf"))
            .arg("-e")
            .arg(dir.path().join("logs/error.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", binary.display()));
        let nginx = Self {
            base: format!("http://127.0.0.1:{port}"),
            child,
            dir,
        };
        nginx.wait_listening(port);
        nginx
    }

    /// The MCP endpoint through nginx.
    pub fn url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    /// nginx's error log so far.
    pub fn errors(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("logs/error.log")).unwrap_or_default()
    }

    /// Waits until nginx accepts connections; panics with its error log if
    /// it exits first.
    fn wait_listening(&self, port: u16) {
        for _ in 0..300 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("nginx did not start listening:\n{}", self.errors());
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- nginx error log ---\n{}", self.errors());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// nginx on `PATH`, or Debian's.
fn find_nginx() -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join("nginx"))
        .chain([PathBuf::from(DEBIAN_NGINX)])
        .find(|candidate| candidate.is_file())
}

/// The configuration the project ships.
fn shipped_config() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/nginx/mcp-code-sandbox.conf");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The shipped configuration with its example replicas and port replaced;
/// each replacement must happen exactly once, so the test follows the file.
fn site_config(shipped: &str, replicas: [&str; 2], port: u16) -> String {
    let listen = format!("listen 127.0.0.1:{port};");
    let mut site = shipped.to_owned();
    for (example, actual) in [
        ("server 127.0.0.1:8801 ", format!("server {} ", replicas[0])),
        ("server 127.0.0.1:8802 ", format!("server {} ", replicas[1])),
        ("listen 8800;", listen),
    ] {
        assert_eq!(
            site.matches(example).count(),
            1,
            "the shipped nginx configuration should have `{example}` once"
        );
        site = site.replace(example, &actual);
    }
    site
}

/// A main configuration for one unprivileged nginx process whose files all
/// live under `dir`.
fn main_config(dir: &Path) -> String {
    let d = dir.display();
    format!(
        "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log {d}/logs/error.log info;\n\
         events {{ worker_connections 1024; }}\n\
         http {{\n\
           access_log {d}/logs/access.log;\n\
           client_body_temp_path {d}/tmp/body;\n\
           proxy_temp_path {d}/tmp/proxy;\n\
           fastcgi_temp_path {d}/tmp/fastcgi;\n\
           uwsgi_temp_path {d}/tmp/uwsgi;\n\
           scgi_temp_path {d}/tmp/scgi;\n\
           include {d}/site.conf;\n\
         }}\n"
    )
}

/// A loopback port free now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
