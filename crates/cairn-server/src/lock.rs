//! One daemon per data directory: an exclusive lock on its `serve.lock` (released by the
//! kernel when the process dies, so a `kill -9` leaves nothing to clean up).

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};

use anyhow::{Context, Result, bail};

/// Held while the daemon runs.
pub struct ServeLock {
    _file: File,
}

impl ServeLock {
    /// Takes the lock or says which process holds it.
    pub fn acquire(layout: &cairn::Layout) -> Result<ServeLock> {
        let data_dir = layout.root();
        std::fs::create_dir_all(data_dir).with_context(|| format!("creating {}", data_dir.display()))?;
        let path = layout.serve_lock();
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                bail!("a cairn daemon already serves {} (pid {})", data_dir.display(), pid.trim());
            }
            Err(TryLockError::Error(e)) => return Err(e).with_context(|| format!("locking {}", path.display())),
        }
        file.set_len(0)?;
        file.seek(SeekFrom::Start(0))?;
        write!(file, "{}", std::process::id())?;
        Ok(ServeLock { _file: file })
    }
}
