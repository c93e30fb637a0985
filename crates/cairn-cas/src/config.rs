//! Where a data directory's sealed packs live: the `[s3]` and `[packs]` tables of
//! `<dir>/cairn.toml`, each field overridden by its environment variable when that is set.
//!
//! ```toml
//! [s3]
//! bucket = "cairn"                    # CAIRN_S3_BUCKET (required for S3)
//! endpoint = "http://127.0.0.1:9000"  # CAIRN_S3_ENDPOINT (omit for AWS)
//! region = "us-east-1"                # CAIRN_S3_REGION, else AWS_REGION
//! prefix = "laptop/"                  # CAIRN_S3_PREFIX
//! path_style = true                   # CAIRN_S3_PATH_STYLE (0 or false: virtual-hosted)
//! timeout_secs = 60                   # one request's time limit before it is retried
//! max_retries = 20
//!
//! [packs]
//! target_mb = 16                      # a pack (one object) is closed at this size, 1 to 1024
//!                                     # (default 16 with a backend, else 64)
//! cache_mb = 1024                     # CAIRN_PACK_CACHE_MB: local cache of uploaded packs
//! remote_dir = "/mnt/big/cairn-packs" # instead of [s3]: packs in another file system
//! ```
//!
//! Credentials are never read from the file: they come from the standard variables
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`) or the instance's role.
//! The application layer (crate `cairn`) reads the file, refuses unknown sections and keys, and
//! hands the two tables ([`S3Table`], [`PacksTable`]) to [`resolve_tables`]; unknown keys inside
//! them are errors too, so a misspelt field is never silently dropped.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_kv::FsStorage;
use serde::Deserialize;

use crate::backend::{LocalBackend, Remote};
use crate::store::StoreConfig;

/// The pack size with a backend when `packs.target_mb` is not set.
pub const REMOTE_PACK_TARGET: u64 = 16 << 20;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct File {
    s3: Option<S3Table>,
    packs: Option<PacksTable>,
}

/// The `[s3]` table (see the module documentation).
#[derive(Clone, Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct S3Table {
    bucket: Option<String>,
    endpoint: Option<String>,
    region: Option<String>,
    prefix: Option<String>,
    path_style: Option<bool>,
    timeout_secs: Option<u64>,
    max_retries: Option<usize>,
}

/// The `[packs]` table (see the module documentation).
#[derive(Clone, Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct PacksTable {
    target_mb: Option<u64>,
    cache_mb: Option<u64>,
    remote_dir: Option<PathBuf>,
}

/// Where sealed packs go, as configured; see the module documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RemoteSpec {
    /// An S3-compatible bucket.
    #[cfg(feature = "s3")]
    S3(crate::S3Config),
    /// A directory of another file system.
    Dir(PathBuf),
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// The configuration as resolved, before any backend is connected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// Pack size target in bytes, when configured.
    pub pack_target: Option<u64>,
    /// Where sealed packs go and the local cache budget in bytes; `None`: packs stay local.
    pub remote: Option<(RemoteSpec, u64)>,
}

/// Resolves the configuration from a file's text holding only `[s3]` and `[packs]` (`None`:
/// no file) and an environment lookup, with `origin` naming the file in errors and relative
/// `remote_dir`s resolved against `base`.
pub fn resolve(
    text: Option<&str>,
    origin: &str,
    base: &Path,
    env: impl Fn(&str) -> Option<String>,
) -> io::Result<Resolved> {
    let file: File = match text {
        Some(t) => toml::from_str(t).map_err(|e| invalid(format!("{origin}: {e}")))?,
        None => File::default(),
    };
    resolve_tables(file.s3.as_ref(), file.packs.as_ref(), origin, base, env)
}

/// Resolves the `[s3]` and `[packs]` tables (each `None` when absent) with an environment
/// lookup; `origin` names the file in errors, relative `remote_dir`s are resolved against `base`.
pub fn resolve_tables(
    s3: Option<&S3Table>,
    packs: Option<&PacksTable>,
    origin: &str,
    base: &Path,
    env: impl Fn(&str) -> Option<String>,
) -> io::Result<Resolved> {
    let env = |k: &str| env(k).filter(|v| !v.is_empty());
    let s3 = s3.cloned().unwrap_or_default();
    let packs = packs.cloned().unwrap_or_default();
    let pack_target = match packs.target_mb {
        Some(mb @ 1..=1024) => Some(mb << 20),
        Some(mb) => return Err(invalid(format!("{origin}: packs.target_mb = {mb} is not within 1 to 1024"))),
        None => None,
    };
    let cache_mb = match env("CAIRN_PACK_CACHE_MB") {
        Some(v) => v.parse().map_err(|_| invalid(format!("CAIRN_PACK_CACHE_MB={v} is not a number of MiB")))?,
        None => packs.cache_mb.unwrap_or(Remote::DEFAULT_CACHE_BYTES >> 20),
    };
    let cache_bytes = cache_mb.checked_mul(1 << 20).ok_or_else(|| invalid(format!("cache of {cache_mb} MiB")))?;
    let bucket = env("CAIRN_S3_BUCKET").or(s3.bucket);
    let spec = match (bucket, packs.remote_dir) {
        (None, None) => return Ok(Resolved { pack_target, remote: None }),
        (Some(_), Some(_)) => {
            return Err(invalid(format!("{origin}: both an S3 bucket and packs.remote_dir are configured")));
        }
        (None, Some(dir)) => RemoteSpec::Dir(base.join(dir)),
        #[cfg(not(feature = "s3"))]
        (Some(b), None) => {
            let _ = (s3.endpoint, s3.region, s3.prefix, s3.path_style, s3.timeout_secs, s3.max_retries);
            return Err(invalid(format!("S3 bucket {b} is configured but this build has no S3 support")));
        }
        #[cfg(feature = "s3")]
        (Some(bucket), None) => {
            let mut c = crate::S3Config::new(bucket);
            c.endpoint = env("CAIRN_S3_ENDPOINT").or(s3.endpoint);
            if let Some(r) = env("CAIRN_S3_REGION").or(s3.region).or_else(|| env("AWS_REGION")) {
                c.region = r;
            }
            c.prefix = env("CAIRN_S3_PREFIX").or(s3.prefix).unwrap_or_default();
            c.path_style = match env("CAIRN_S3_PATH_STYLE") {
                Some(v) => match v.as_str() {
                    "1" | "true" => true,
                    "0" | "false" => false,
                    _ => return Err(invalid(format!("CAIRN_S3_PATH_STYLE={v}: expected 1, 0, true or false"))),
                },
                None => s3.path_style.unwrap_or(true),
            };
            if let Some(t) = s3.timeout_secs {
                if t == 0 {
                    return Err(invalid(format!("{origin}: s3.timeout_secs must be at least 1")));
                }
                c.timeout = std::time::Duration::from_secs(t);
            }
            if let Some(n) = s3.max_retries {
                c.max_retries = n;
            }
            RemoteSpec::S3(c)
        }
    };
    Ok(Resolved { pack_target, remote: Some((spec, cache_bytes)) })
}

/// The store's settings and the backend of its sealed packs (`None`: packs stay local), as
/// `resolved` says; connects to the backend.
pub fn connect(resolved: Resolved) -> io::Result<(StoreConfig, Option<Remote>)> {
    let mut store = StoreConfig::default();
    store.pack_target = match (resolved.pack_target, &resolved.remote) {
        (Some(t), _) => t,
        // Smaller objects start uploading and downloading sooner (restic's packs are 16 MiB).
        (None, Some(_)) => REMOTE_PACK_TARGET,
        (None, None) => store.pack_target,
    };
    let Some((spec, cache_bytes)) = resolved.remote else { return Ok((store, None)) };
    let backend: Arc<dyn crate::Backend> = match spec {
        #[cfg(feature = "s3")]
        RemoteSpec::S3(c) => Arc::new(crate::S3Backend::new(c)?),
        RemoteSpec::Dir(dir) => Arc::new(LocalBackend::new(Arc::new(FsStorage::new()), dir)?),
    };
    Ok((store, Some(Remote { backend, cache_bytes })))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn run(text: Option<&str>, env: &[(&str, &str)]) -> io::Result<Option<(RemoteSpec, u64)>> {
        Ok(resolved(text, env)?.remote)
    }

    fn resolved(text: Option<&str>, env: &[(&str, &str)]) -> io::Result<Resolved> {
        let env: HashMap<String, String> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        resolve(text, "cairn.toml", Path::new("/data"), |k| env.get(k).cloned())
    }

    #[test]
    fn nothing_configured_is_local() {
        assert_eq!(resolved(None, &[]).unwrap(), Resolved { pack_target: None, remote: None });
        let text = "[packs]\ncache_mb = 5\ntarget_mb = 16\n";
        assert_eq!(resolved(Some(text), &[]).unwrap(), Resolved { pack_target: Some(16 << 20), remote: None });
    }

    #[cfg(feature = "s3")]
    #[test]
    fn file_fields_and_env_overrides() {
        let text = "[s3]\nbucket = \"b\"\nendpoint = \"http://h:9000\"\nregion = \"eu-west-1\"\n\
                    prefix = \"p/\"\npath_style = false\ntimeout_secs = 7\nmax_retries = 3\n[packs]\ncache_mb = 64\n";
        let (spec, cache) = run(Some(text), &[("AWS_REGION", "ignored")]).unwrap().unwrap();
        let RemoteSpec::S3(c) = spec else { panic!("{spec:?}") };
        assert_eq!(cache, 64 << 20);
        assert_eq!(
            (c.bucket.as_str(), c.endpoint.as_deref(), c.region.as_str(), c.prefix.as_str()),
            ("b", Some("http://h:9000"), "eu-west-1", "p/")
        );
        assert!(!c.path_style);
        assert_eq!((c.timeout, c.max_retries), (std::time::Duration::from_secs(7), 3));
        let env = [
            ("CAIRN_S3_BUCKET", "b2"),
            ("CAIRN_S3_ENDPOINT", "http://e"),
            ("CAIRN_S3_REGION", "r"),
            ("CAIRN_S3_PREFIX", "q/"),
            ("CAIRN_S3_PATH_STYLE", "1"),
            ("CAIRN_PACK_CACHE_MB", "2"),
        ];
        let (spec, cache) = run(Some(text), &env).unwrap().unwrap();
        let RemoteSpec::S3(c) = spec else { panic!("{spec:?}") };
        assert_eq!(cache, 2 << 20);
        assert_eq!((c.bucket.as_str(), c.endpoint.as_deref(), c.region.as_str()), ("b2", Some("http://e"), "r"));
        assert_eq!(c.prefix, "q/");
        assert!(c.path_style);
        // The environment alone, with the defaults.
        let (spec, cache) = run(None, &[("CAIRN_S3_BUCKET", "b"), ("AWS_REGION", "ap-south-1")]).unwrap().unwrap();
        let RemoteSpec::S3(c) = spec else { panic!("{spec:?}") };
        assert_eq!((c.region.as_str(), c.path_style, cache), ("ap-south-1", true, 1 << 30));
        assert_eq!(c.endpoint, None);
    }

    #[test]
    fn pack_size_defaults_smaller_with_a_backend() {
        let t = tempfile::tempdir().unwrap();
        let load = |text: Option<&str>| connect(resolve(text, "cairn.toml", t.path(), |_| None).unwrap());
        let (store, remote) = load(None).unwrap();
        assert!(remote.is_none() && store.pack_target == 64 << 20);
        let (store, remote) = load(Some("[packs]\nremote_dir = \"archive\"\n")).unwrap();
        assert_eq!(remote.unwrap().backend.location(), t.path().join("archive").display().to_string());
        assert_eq!(store.pack_target, REMOTE_PACK_TARGET);
        assert_eq!(load(Some("[packs]\nremote_dir = \"archive\"\ntarget_mb = 2\n")).unwrap().0.pack_target, 2 << 20);
    }

    #[test]
    fn remote_dir_is_relative_to_the_data_dir() {
        let (spec, _) = run(Some("[packs]\nremote_dir = \"../archive\"\n"), &[]).unwrap().unwrap();
        assert_eq!(spec, RemoteSpec::Dir(PathBuf::from("/data/../archive")));
        let (spec, _) = run(Some("[packs]\nremote_dir = \"/mnt/p\"\n"), &[]).unwrap().unwrap();
        assert_eq!(spec, RemoteSpec::Dir(PathBuf::from("/mnt/p")));
    }

    #[test]
    fn mistakes_are_clear_errors() {
        let err = |text: Option<&str>, env: &[(&str, &str)]| run(text, env).unwrap_err().to_string();
        let e = err(Some("[s3]\nbuckt = \"b\"\n"), &[]);
        assert!(e.contains("cairn.toml") && e.contains("buckt"), "{e}");
        let e = err(Some("[s3]\nbucket = 5\n"), &[]);
        assert!(e.contains("cairn.toml") && e.contains("bucket"), "{e}");
        let e = err(Some("[s3\n"), &[]);
        assert!(e.contains("cairn.toml"), "{e}");
        let e = err(Some("[server]\ntoken = \"x\"\n"), &[]);
        assert!(e.contains("cairn.toml"), "{e}");
        let e = err(Some("[packs]\ncache_mb = -1\n"), &[]);
        assert!(e.contains("cache_mb"), "{e}");
        for bad in ["0", "1025"] {
            let e = err(Some(&format!("[packs]\ntarget_mb = {bad}\n")), &[]);
            assert!(e.contains("target_mb"), "{e}");
        }
        let e = err(None, &[("CAIRN_PACK_CACHE_MB", "lots")]);
        assert!(e.contains("CAIRN_PACK_CACHE_MB=lots"), "{e}");
        let e = err(Some("[packs]\nremote_dir = \"/x\"\n"), &[("CAIRN_S3_BUCKET", "b")]);
        assert!(e.contains("both"), "{e}");
        let e = err(None, &[("CAIRN_PACK_CACHE_MB", &u64::MAX.to_string())]);
        assert!(e.contains("MiB"), "{e}");
        #[cfg(feature = "s3")]
        {
            let e = err(None, &[("CAIRN_S3_BUCKET", "b"), ("CAIRN_S3_PATH_STYLE", "yes")]);
            assert!(e.contains("CAIRN_S3_PATH_STYLE=yes"), "{e}");
            let e = err(Some("[s3]\nbucket = \"b\"\ntimeout_secs = 0\n"), &[]);
            assert!(e.contains("timeout_secs"), "{e}");
        }
    }
}
