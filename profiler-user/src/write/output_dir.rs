//! The output directory of one recording, claimed before it starts.
//!
//! A directory holds one recording and nothing else, so that a reader who
//! globs `*.folded` never mixes two runs:
//! - a path that does not exist is created (0750, never through a symlink);
//! - an empty directory is used as it is;
//! - a previous sparkprof recording (its `index.json` says `"tool":
//!   "sparkprof ..."` and everything there is a file it lists, its flame
//!   graph, a leftover temporary file of ours, or a directory on their way)
//!   is replaced whole: its files are removed before recording starts;
//! - anything else (a regular file, a symlink, a directory with other files)
//!   is refused before recording, with the reason.
//!
//! The directory stays locked (`flock` on the directory itself) for as long
//! as the [`OutputDir`] lives: a second `record` into it is refused at once
//! instead of interleaving with the first.

use std::{
    collections::HashSet,
    fs::{self, File},
    io,
    os::{fd::AsRawFd as _, unix::fs::OpenOptionsExt as _},
    path::{Path, PathBuf},
};

use thiserror::Error;

use super::atomic;

/// The index every recording writes.
pub const INDEX: &str = "index.json";

#[derive(Debug, Error)]
pub enum OutputDirError {
    #[error("output {0} exists and is not a directory")]
    NotADirectory(PathBuf),
    #[error("output {0} is a symlink; refusing to write through it")]
    Symlink(PathBuf),
    #[error(
        "output directory {path} holds files that are not a sparkprof recording (e.g. {example}); \
         give a new or empty directory, or a previous recording's, which is replaced whole"
    )]
    Foreign { path: PathBuf, example: PathBuf },
    #[error("another sparkprof is recording into {0}")]
    Locked(PathBuf),
    #[error("output directory {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

/// A claimed, locked output directory.
#[derive(Debug)]
pub struct OutputDir {
    path: PathBuf,
    /// Holds the `flock`; released when dropped.
    _lock: File,
    /// Files of a previous recording that were removed.
    replaced: usize,
}

impl OutputDir {
    /// Claims `path` for a new recording (see the module documentation).
    pub fn claim(path: &Path) -> Result<Self, OutputDirError> {
        let io_error = |source| OutputDirError::Io {
            path: path.to_path_buf(),
            source,
        };
        match fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(OutputDirError::Symlink(path.to_path_buf()));
            }
            Ok(meta) if !meta.is_dir() => {
                return Err(OutputDirError::NotADirectory(path.to_path_buf()));
            }
            Ok(_) => {}
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                atomic::ensure_dirs(path, Path::new("")).map_err(io_error)?;
            }
            Err(err) => return Err(io_error(err)),
        }
        let lock = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(io_error)?;
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let err = io::Error::last_os_error();
            return Err(if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                OutputDirError::Locked(path.to_path_buf())
            } else {
                io_error(err)
            });
        }
        let replaced = replace_previous(path)?;
        // Can we write here at all (a read-only mount, no permission)? Better
        // known now than after the recording.
        atomic::write_atomic(path, Path::new(".sparkprof-probe"), b"")
            .and_then(|()| fs::remove_file(path.join(".sparkprof-probe")))
            .map_err(io_error)?;
        Ok(Self {
            path: path.to_path_buf(),
            _lock: lock,
            replaced,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many files of a previous recording were removed.
    pub fn replaced(&self) -> usize {
        self.replaced
    }
}

/// Every file and directory below `root`, relative to it (symlinks as
/// themselves, never followed).
fn walk(root: &Path) -> io::Result<(Vec<PathBuf>, Vec<PathBuf>)> {
    let (mut files, mut dirs) = (Vec::new(), Vec::new());
    let mut pending = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        for entry in fs::read_dir(root.join(&rel))? {
            let entry = entry?;
            let child = rel.join(entry.file_name());
            if entry.file_type()?.is_dir() {
                dirs.push(child.clone());
                pending.push(child);
            } else {
                files.push(child);
            }
        }
    }
    Ok((files, dirs))
}

/// Files a sparkprof index at `root` lists: itself, its samples table,
/// every folded file, its flame graph and its pprof twin. `None` if there
/// is no such index.
fn listed_by_index(root: &Path) -> Option<HashSet<PathBuf>> {
    let meta = fs::symlink_metadata(root.join(INDEX)).ok()?;
    if !meta.is_file() {
        return None;
    }
    let index: serde_json::Value =
        serde_json::from_slice(&fs::read(root.join(INDEX)).ok()?).ok()?;
    if !index["tool"].as_str()?.starts_with("sparkprof") {
        return None;
    }
    let mut listed = HashSet::from([PathBuf::from(INDEX)]);
    if let Some(table) = index["samples_table"].as_str() {
        listed.insert(PathBuf::from(table));
    }
    for file in index["files"].as_array()? {
        for key in ["path", "svg", "pprof"] {
            if let Some(path) = file[key].as_str() {
                listed.insert(PathBuf::from(path));
            }
        }
    }
    Some(listed)
}

/// A temporary file `atomic::write_atomic` left behind (a killed writer).
fn is_our_temporary(rel: &Path) -> bool {
    rel.file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| name.starts_with('.') && name.contains(".tmp-"))
}

/// Empties `root` of a previous recording; refuses anything else.
fn replace_previous(root: &Path) -> Result<usize, OutputDirError> {
    let io_error = |source| OutputDirError::Io {
        path: root.to_path_buf(),
        source,
    };
    let (files, mut dirs) = walk(root).map_err(io_error)?;
    if files.is_empty() && dirs.is_empty() {
        return Ok(0);
    }
    let listed = listed_by_index(root).unwrap_or_default();
    let ours = |rel: &PathBuf| {
        let kept = listed.contains(rel) || is_our_temporary(rel);
        kept && fs::symlink_metadata(root.join(rel)).is_ok_and(|meta| meta.is_file())
    };
    let foreign = |example: &Path| OutputDirError::Foreign {
        path: root.to_path_buf(),
        example: root.join(example),
    };
    if let Some(stranger) = files.iter().find(|rel| !ours(rel)) {
        return Err(foreign(stranger));
    }
    // A directory with nothing of ours below it is someone else's.
    if let Some(stranger) = dirs
        .iter()
        .find(|dir| !files.iter().any(|file| file.starts_with(dir)))
    {
        return Err(foreign(stranger));
    }
    for rel in &files {
        fs::remove_file(root.join(rel)).map_err(io_error)?;
    }
    // Deepest first.
    dirs.sort_by_key(|dir| std::cmp::Reverse(dir.components().count()));
    for dir in &dirs {
        fs::remove_dir(root.join(dir)).map_err(io_error)?;
    }
    Ok(files.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recording(root: &Path) {
        fs::create_dir_all(root.join("processes")).unwrap();
        fs::write(root.join("processes/a-1.cpu.folded"), "a;b 1\n").unwrap();
        fs::write(root.join("processes/a-1.cpu.svg"), "<svg/>").unwrap();
        fs::write(
            root.join(INDEX),
            r#"{"tool": "sparkprof 0.1.0", "files": [{"path": "processes/a-1.cpu.folded", "svg": "processes/a-1.cpu.svg"}]}"#,
        )
        .unwrap();
    }

    /// Claims `dir` again once the last claim is dropped: a child another
    /// test forked may hold the released lock's descriptor a moment longer
    /// (until it execs).
    fn claim_again(dir: &Path) -> OutputDir {
        for _ in 0..200 {
            match OutputDir::claim(dir) {
                Err(OutputDirError::Locked(_)) => {
                    std::thread::sleep(std::time::Duration::from_millis(10))
                }
                other => return other.unwrap(),
            }
        }
        panic!("{} stayed locked", dir.display());
    }

    #[test]
    fn creates_a_missing_directory_and_uses_an_empty_one() {
        let base = tempfile::tempdir().unwrap();
        let out = base.path().join("new/out");
        let claimed = OutputDir::claim(&out).unwrap();
        assert!(out.is_dir());
        assert_eq!(claimed.replaced(), 0);
        drop(claimed);
        assert_eq!(claim_again(&out).replaced(), 0);
        assert_eq!(fs::read_dir(&out).unwrap().count(), 0, "no probe left");
    }

    #[test]
    fn replaces_a_previous_recording_whole() {
        let base = tempfile::tempdir().unwrap();
        recording(base.path());
        fs::write(base.path().join("processes/.x.folded.tmp-1-2"), "").unwrap();
        let claimed = OutputDir::claim(base.path()).unwrap();
        assert_eq!(claimed.replaced(), 4);
        assert_eq!(fs::read_dir(base.path()).unwrap().count(), 0);
    }

    /// Each case in a directory of its own: a lock released by one claim
    /// may still be held a moment by a child another test forked (it
    /// inherits the descriptor until it execs).
    #[test]
    fn refuses_what_is_not_a_recording() {
        let foreign = |dir: &Path, what: &str| match OutputDir::claim(dir) {
            Err(OutputDirError::Foreign { example, .. }) => example,
            other => panic!("{what}: {other:?}"),
        };

        let base = tempfile::tempdir().unwrap();
        recording(base.path());
        fs::write(base.path().join("notes.txt"), "mine").unwrap();
        assert!(foreign(base.path(), "a file of someone else's").ends_with("notes.txt"));
        // Nothing was removed.
        assert!(base.path().join("processes/a-1.cpu.folded").exists());
        assert!(base.path().join("notes.txt").exists());

        // An empty directory of someone else's, beside a recording.
        let base = tempfile::tempdir().unwrap();
        recording(base.path());
        fs::create_dir(base.path().join("theirs")).unwrap();
        assert!(foreign(base.path(), "a directory of someone else's").ends_with("theirs"));

        // A listed name that is a symlink is not ours to remove.
        let base = tempfile::tempdir().unwrap();
        recording(base.path());
        fs::remove_file(base.path().join("processes/a-1.cpu.svg")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", base.path().join("processes/a-1.cpu.svg"))
            .unwrap();
        assert!(foreign(base.path(), "a symlink").ends_with("a-1.cpu.svg"));

        // Files without a sparkprof index.
        let other = tempfile::tempdir().unwrap();
        fs::write(other.path().join("x.folded"), "a 1\n").unwrap();
        assert!(foreign(other.path(), "no index").ends_with("x.folded"));
    }

    #[test]
    fn refuses_a_file_and_a_second_claim() {
        let base = tempfile::tempdir().unwrap();
        let file = base.path().join("file");
        fs::write(&file, "x").unwrap();
        assert!(matches!(
            OutputDir::claim(&file),
            Err(OutputDirError::NotADirectory(_))
        ));
        let link = base.path().join("link");
        std::os::unix::fs::symlink(base.path(), &link).unwrap();
        assert!(matches!(
            OutputDir::claim(&link),
            Err(OutputDirError::Symlink(_))
        ));

        let out = base.path().join("out");
        let first = OutputDir::claim(&out).unwrap();
        assert!(matches!(
            OutputDir::claim(&out),
            Err(OutputDirError::Locked(_))
        ));
        drop(first);
        claim_again(&out);
    }
}
