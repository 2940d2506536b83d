//! Opening the server's own files under a sandbox root that others may
//! share (replicas, or local users who can write it): only regular files,
//! never through a symbolic link, never blocking on a FIFO or a device, and
//! reading no more than a bound; and making directories only the server's
//! user can enter.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::path::Path;

/// Opens `path` for reading if it is a regular file reached without
/// following a symbolic link; anything else is refused (`InvalidData`).
pub fn open_regular(path: &Path) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(
            rustix::fs::OFlags::NOFOLLOW.bits() as i32 | rustix::fs::OFlags::NONBLOCK.bits() as i32,
        );
    }
    let file = options.open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} is not a regular file", path.display()),
        ));
    }
    Ok(file)
}

/// The bytes of the regular file `path` (see [`open_regular`]), refused
/// when it holds more than `max`.
pub fn read_regular(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    read_bounded(open_regular(path)?, path, max)
}

/// All of `file` (named `path` in errors), refused when it holds more than `max`.
fn read_bounded(file: impl Read, path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} is larger than {max} bytes", path.display()),
        ));
    }
    Ok(bytes)
}

/// The bytes of the regular file `path` inside `dir` (reached without
/// leaving `dir` or following a link at its last part, never blocking on a
/// FIFO), refused when it holds more than `max`.
pub fn read_regular_in(dir: &cap_std::fs::Dir, path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt};

    let mut options = cap_std::fs::OpenOptions::new();
    options.read(true).follow(FollowSymlinks::No);
    #[cfg(unix)]
    {
        use cap_std::fs::OpenOptionsExt;
        options.custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32);
    }
    let file = dir.open_with(path, &options)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} is not a regular file", path.display()),
        ));
    }
    read_bounded(file, path, max)
}

/// Makes `path` and its missing parents; the directories made are for the
/// server's user alone (mode 0700 on Unix).
pub fn create_private_dir(path: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_are_opened() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"abc").unwrap();
        assert_eq!(read_regular(&file, 3).unwrap(), b"abc");
        assert!(read_regular(&file, 2).is_err(), "over the bound");
        #[cfg(unix)]
        {
            let link = dir.path().join("link");
            std::os::unix::fs::symlink(&file, &link).unwrap();
            assert!(open_regular(&link).is_err(), "a symbolic link");
            let fifo = dir.path().join("fifo");
            rustix::fs::mkfifoat(
                rustix::fs::CWD,
                &fifo,
                rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
            )
            .unwrap();
            assert!(
                open_regular(&fifo).is_err(),
                "a FIFO, refused without blocking"
            );
        }
        assert!(open_regular(dir.path()).is_err(), "a directory");
    }

    #[cfg(unix)]
    #[test]
    fn private_directories_are_the_owners_alone() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let made = dir.path().join("a/b");
        create_private_dir(&made).unwrap();
        let mode = std::fs::metadata(&made).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }
}
