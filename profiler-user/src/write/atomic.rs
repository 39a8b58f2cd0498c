//! Writing output files atomically and never through a symlink.
//!
//! Each file is written to a fresh temporary name in its final directory
//! (`O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0640), flushed to disk, then renamed over
//! the final name. A reader sees the old file or the new one, never a torn
//! one; a planted symlink is neither followed nor written through (a rename
//! replaces the link itself). Directories on the way are created 0750 and
//! must be real directories, not symlinks.

use std::{
    fs::{self, DirBuilder, OpenOptions},
    io::{self, Write},
    os::unix::fs::{DirBuilderExt, OpenOptionsExt},
    path::{Component, Path, PathBuf},
    sync::atomic::{AtomicU64, Ordering},
};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Creates `root` (if needed) and `rel`'s parent directories below it,
/// refusing symlinks anywhere from `root` down.
pub fn ensure_dirs(root: &Path, rel: &Path) -> io::Result<PathBuf> {
    make_real_dir(root)?;
    let mut dir = root.to_path_buf();
    if let Some(parent) = rel.parent() {
        for component in parent.components() {
            match component {
                Component::Normal(name) => {
                    dir.push(name);
                    make_real_dir(&dir)?;
                }
                _ => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("bad output path {}", rel.display()),
                    ));
                }
            }
        }
    }
    Ok(dir)
}

fn make_real_dir(dir: &Path) -> io::Result<()> {
    match fs::symlink_metadata(dir) {
        Ok(meta) if meta.file_type().is_symlink() => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is a symlink; refusing to write through it",
                dir.display()
            ),
        )),
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} is not a directory", dir.display()),
        )),
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            DirBuilder::new().recursive(true).mode(0o750).create(dir)
        }
        Err(err) => Err(err),
    }
}

/// Atomically replaces `root/rel` with `bytes`.
pub fn write_atomic(root: &Path, rel: &Path, bytes: &[u8]) -> io::Result<()> {
    replace(root, rel, |tmp| {
        let mut file = create(tmp)?;
        file.write_all(bytes)?;
        file.sync_data()
    })
}

/// Atomically replaces `root/rel` with what `write` writes (buffered), for
/// a file whose text need not be held whole to be written.
pub fn write_atomic_with(
    root: &Path,
    rel: &Path,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    replace(root, rel, |tmp| {
        let mut buffered = io::BufWriter::with_capacity(WRITE_BUFFER, create(tmp)?);
        write(&mut buffered)?;
        buffered
            .into_inner()
            .map_err(io::IntoInnerError::into_error)?
            .sync_data()
    })
}

/// A new file at `tmp`, mode 0640, never through a symlink.
fn create(tmp: &Path) -> io::Result<fs::File> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o640)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(tmp)?;
    // The creation mode is filtered by the umask; make it exact.
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o640))?;
    Ok(file)
}

/// Bytes [`write_atomic_with`] gathers before each write to the file.
const WRITE_BUFFER: usize = 64 * 1024;

/// Atomically makes `root/rel` another name of the file at `from`, a
/// regular file this process wrote whole (with [`write_atomic`]) and never
/// changes in place: a daemon's roll-up takes its first window's files so,
/// where writing them again was a tenth of its CPU on a Spark host. Fails
/// (and leaves `root/rel` as it was) if `from` is not a regular file, or
/// on a file system without hard links: the caller then writes.
pub fn link_atomic(root: &Path, rel: &Path, from: &Path) -> io::Result<()> {
    if !fs::symlink_metadata(from)?.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", from.display()),
        ));
    }
    // linkat without AT_SYMLINK_FOLLOW: `from` itself, never where a link
    // put in its place since would lead.
    replace(root, rel, |tmp| fs::hard_link(from, tmp))
}

/// Makes `root/rel` what `make` creates at a fresh temporary name beside
/// it, by a rename over it.
fn replace(root: &Path, rel: &Path, make: impl FnOnce(&Path) -> io::Result<()>) -> io::Result<()> {
    let dir = ensure_dirs(root, rel)?;
    let file_name = rel.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad output path {}", rel.display()),
        )
    })?;
    let target = dir.join(file_name);
    let tmp = dir.join(format!(
        ".{}.tmp-{}-{}",
        file_name.to_string_lossy(),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = make(&tmp).and_then(|()| fs::rename(&tmp, &target));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map_err(|err| io::Error::new(err.kind(), format!("writing {}: {err}", target.display())))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{PermissionsExt, symlink};

    use super::*;

    #[test]
    fn writes_with_0640_and_replaces() {
        let root = tempfile::tempdir().unwrap();
        write_atomic(root.path(), Path::new("a/b.folded"), b"one").unwrap();
        write_atomic(root.path(), Path::new("a/b.folded"), b"two").unwrap();
        let path = root.path().join("a/b.folded");
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o640
        );
        // No temporary file left behind.
        assert_eq!(fs::read_dir(root.path().join("a")).unwrap().count(), 1);
    }

    #[test]
    fn replaces_a_planted_symlink_without_following_it() {
        let root = tempfile::tempdir().unwrap();
        let victim = root.path().join("victim");
        fs::write(&victim, b"precious").unwrap();
        symlink(&victim, root.path().join("out.folded")).unwrap();
        write_atomic(root.path(), Path::new("out.folded"), b"data").unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert!(
            !fs::symlink_metadata(root.path().join("out.folded"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }

    #[test]
    fn links_a_file_over_a_planted_symlink_and_refuses_to_link_a_symlink() {
        use std::os::unix::fs::MetadataExt;
        let root = tempfile::tempdir().unwrap();
        write_atomic(root.path(), Path::new("w/a.svg"), b"graph").unwrap();
        let from = root.path().join("w/a.svg");
        let victim = root.path().join("victim");
        fs::write(&victim, b"precious").unwrap();
        fs::create_dir_all(root.path().join("r")).unwrap();
        symlink(&victim, root.path().join("r/a.svg")).unwrap();
        link_atomic(root.path(), Path::new("r/a.svg"), &from).unwrap();
        let linked = root.path().join("r/a.svg");
        assert_eq!(fs::read(&linked).unwrap(), b"graph");
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert_eq!(
            fs::symlink_metadata(&linked).unwrap().ino(),
            fs::metadata(&from).unwrap().ino()
        );
        // A rewrite of one name leaves the other as it was.
        write_atomic(root.path(), Path::new("r/a.svg"), b"redrawn").unwrap();
        assert_eq!(fs::read(&from).unwrap(), b"graph");
        // A symlink is not linked, and no temporary name is left.
        let planted = root.path().join("w/b.svg");
        symlink(&victim, &planted).unwrap();
        assert!(link_atomic(root.path(), Path::new("r/b.svg"), &planted).is_err());
        assert!(
            link_atomic(
                root.path(),
                Path::new("r/c.svg"),
                &root.path().join("w/none")
            )
            .is_err()
        );
        assert_eq!(fs::read_dir(root.path().join("r")).unwrap().count(), 1);
    }

    #[test]
    fn refuses_a_symlinked_directory() {
        let root = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        symlink(elsewhere.path(), root.path().join("processes")).unwrap();
        let err = write_atomic(root.path(), Path::new("processes/x.folded"), b"data").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
        assert_eq!(fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    }
}
