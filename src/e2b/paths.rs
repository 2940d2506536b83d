//! The one rule for paths on E2B: a path names the same file for the file
//! tools and for the code, as on the local backend.
//!
//! The sandbox's `/` is the VM's `/`, and the code's working directory is `/`
//! too (E2B starts the interpreter in `/home/user`; the first execution moves
//! it, see [`WORKING_DIRECTORY_CELL`]). So `/data/in.txt` is `/data/in.txt`
//! for `write_file` and for `open()`, and `data.csv` is `/data.csv` for both.
//! The file tools act as [`FILE_USER`], the user E2B's code interpreter runs
//! code as, so they can reach every file the code can. Paths reported by an
//! execution (the files that hold whole outputs) follow the same rule.

use crate::sandbox::GuestPath;

/// The code's working directory, and the directory relative paths of the
/// file tools start from.
pub(crate) const WORKING_DIRECTORY: &str = "/";

/// The Linux user file requests run as: E2B's code interpreter runs its
/// kernels as root, so the tools see and write what the code does.
pub(crate) const FILE_USER: &str = "root";

/// The cell run before the first execution: it moves the interpreter from
/// E2B's `/home/user` to [`WORKING_DIRECTORY`], binding no name.
pub(crate) const WORKING_DIRECTORY_CELL: &str = "__import__(\"os\").chdir(\"/\")";

/// The path in the VM for a guest path (the same path).
pub(crate) fn vm_path(path: &GuestPath) -> String {
    path.to_string()
}

/// The guest path for a path envd reports (the same path).
pub(crate) fn guest_path_of(vm: &str) -> String {
    vm.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guest_path_is_the_same_path_in_the_vm() {
        let p = |s: &str| GuestPath::parse(s).unwrap();
        assert_eq!(vm_path(&p("/")), "/");
        assert_eq!(vm_path(&p("data/a.csv")), "/data/a.csv");
        assert_eq!(vm_path(&p("/home/user/x")), "/home/user/x");
        assert_eq!(guest_path_of("/home/user/a.csv"), "/home/user/a.csv");
    }
}
