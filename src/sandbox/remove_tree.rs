//! [`remove_tree`]: removes a directory and everything in it, however deep,
//! with a handful of descriptors, never following a link.
//!
//! A recursive removal holds a descriptor (and a stack frame) per level, so a
//! tree a guest built 10,000 levels deep by renaming directories into one
//! another would exhaust either. Instead, every subdirectory found inside a
//! top-level directory is first moved up to the top level under a fresh name;
//! the tree flattens as it is emptied, and no more than two directories are
//! ever open.

use std::io;
use std::path::Path;

use cap_fs_ext::DirExt;
use cap_std::ambient_authority;
use cap_std::fs::Dir;

/// Removes `path` and everything beneath it. A path that does not exist is
/// not an error. Its last part is looked at and opened through its parent's
/// descriptor, never followed: a directory swapped for a link meanwhile
/// loses the link, not what it points to.
pub fn remove_tree(path: &Path) -> io::Result<()> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} names no entry of a directory", path.display()),
        ));
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    let parent = match Dir::open_ambient_dir(parent, ambient_authority()) {
        Ok(dir) => dir,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    match remove_tree_in(&parent, name) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        done => done,
    }
}

/// Removes the entry `name` of `parent` and everything beneath it (a link
/// is removed, not followed).
pub fn remove_tree_in(parent: &Dir, name: impl AsRef<Path>) -> io::Result<()> {
    let name = name.as_ref();
    let meta = parent.symlink_metadata(name)?;
    if !meta.is_dir() {
        return parent.remove_file(name);
    }
    let top = parent.open_dir_nofollow(name)?;
    empty(&top)?;
    drop(top);
    parent.remove_dir(name)
}

/// Empties `top`: files go at once, directories are flattened into `top`
/// and removed once empty.
fn empty(top: &Dir) -> io::Result<()> {
    let mut hoisted = 0u64;
    loop {
        let mut left = false;
        for entry in top.entries()? {
            let entry = entry?;
            let name = entry.file_name();
            if !entry.file_type()?.is_dir() {
                top.remove_file(&name)?;
                continue;
            }
            left = true;
            let sub = top.open_dir_nofollow(&name)?;
            for child in sub.entries()? {
                let child = child?;
                let child_name = child.file_name();
                if child.file_type()?.is_dir() {
                    let new_name = fresh_name(top, &mut hoisted);
                    sub.rename(&child_name, top, &new_name)?;
                } else {
                    sub.remove_file(&child_name)?;
                }
            }
            drop(sub);
            top.remove_dir(&name)?;
        }
        if !left {
            return Ok(());
        }
    }
}

/// A name not yet used at the top level.
fn fresh_name(top: &Dir, counter: &mut u64) -> String {
    loop {
        *counter += 1;
        let name = format!(".removing-{counter}");
        if top.symlink_metadata(&name).is_err() {
            return name;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_very_deep_tree_goes_and_links_out_are_not_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep.txt"), "keep").unwrap();
        let victim = tmp.path().join("victim");
        std::fs::create_dir(&victim).unwrap();
        // 3000 levels, built as a guest would: by renaming a tree into a new
        // directory again and again (a path that long cannot be created at once).
        std::fs::create_dir(victim.join("t")).unwrap();
        std::fs::write(victim.join("t/leaf.txt"), "x").unwrap();
        for _ in 0..3000 {
            std::fs::create_dir(victim.join("n")).unwrap();
            std::fs::rename(victim.join("t"), victim.join("n/t")).unwrap();
            std::fs::rename(victim.join("n"), victim.join("t")).unwrap();
        }
        std::os::unix::fs::symlink(&outside, victim.join("t/link")).unwrap();
        remove_tree(&victim).unwrap();
        assert!(!victim.exists());
        assert_eq!(
            std::fs::read_to_string(outside.join("keep.txt")).unwrap(),
            "keep"
        );
        remove_tree(&victim).unwrap();
    }

    #[test]
    fn a_directory_swapped_for_a_link_loses_the_link_not_what_it_points_to() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep.txt"), "keep").unwrap();
        let swapped = tmp.path().join("server-x");
        std::os::unix::fs::symlink(&outside, &swapped).unwrap();
        remove_tree(&swapped).unwrap();
        assert!(
            std::fs::symlink_metadata(&swapped).is_err(),
            "the link goes"
        );
        assert_eq!(
            std::fs::read_to_string(outside.join("keep.txt")).unwrap(),
            "keep"
        );
    }
}
