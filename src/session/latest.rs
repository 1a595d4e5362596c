//! The latest session of each folder, for `pen run --continue`: a small file per folder under
//! the data folder (`latest/<hash of the folder's path>`) holding the session id and the path,
//! written after each turn a command-line front end runs there. One file per folder, replaced
//! atomically, so two processes in two folders never touch the same file, and two in one
//! folder leave the one that wrote last, which is the latest.

use std::path::{Path, PathBuf};

/// The folder, under the data folder, of the records.
const LATEST_DIR: &str = "latest";

fn record_file(data_dir: &Path, root: &Path) -> PathBuf {
    let key = xxhash_rust::xxh3::xxh3_64(root.as_os_str().as_encoded_bytes());
    data_dir.join(LATEST_DIR).join(format!("{key:016x}"))
}

/// Records `session_id` as the latest session of `root`.
pub fn remember(data_dir: &Path, root: &Path, session_id: &str) -> std::io::Result<()> {
    let file = record_file(data_dir, root);
    let dir = file.parent().unwrap_or(data_dir);
    std::fs::create_dir_all(dir)?;
    let mut temp = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(
        &mut temp,
        format!("{session_id}\n{}", root.display()).as_bytes(),
    )?;
    temp.persist(&file).map_err(|e| e.error)?;
    Ok(())
}

/// The latest session recorded for `root`, if any (a record of another folder whose path
/// hashes the same is not taken).
pub fn latest(data_dir: &Path, root: &Path) -> Option<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(record_file(data_dir, root))
        .ok()?
        .take(crate::limits::MAX_LATEST_RECORD_BYTES)
        .read_to_string(&mut text)
        .ok()?;
    let (id, path) = text.split_once('\n')?;
    (path == root.display().to_string() && !id.is_empty()).then(|| id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_folder_keeps_its_own_latest_session() {
        let data = tempfile::tempdir().unwrap();
        let (one, two) = (Path::new("/srv/one"), Path::new("/srv/two"));
        assert_eq!(latest(data.path(), one), None);
        remember(data.path(), one, "s_1").unwrap();
        remember(data.path(), two, "s_2").unwrap();
        remember(data.path(), one, "s_3").unwrap();
        assert_eq!(latest(data.path(), one).as_deref(), Some("s_3"));
        assert_eq!(latest(data.path(), two).as_deref(), Some("s_2"));
    }
}
