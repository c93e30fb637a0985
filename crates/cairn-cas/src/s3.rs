//! The S3-compatible [`Backend`] (AWS S3, MinIO, Cloudflare R2, Garage) through `object_store`:
//! request signing, retries with exponential backoff on 5xx answers and timeouts, and multipart
//! upload of large packs are that crate's. Pack `n` is the object `<prefix>pack-<n:08>.pack`.

use std::future::Future;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, PutPayload, RetryConfig, WriteMultipart};

use crate::backend::Backend;
use crate::pack;

/// Packs at least this large are uploaded in parts of this size.
const PART: usize = 8 << 20;

/// Where an S3 backend is. Credentials come from the standard environment variables
/// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`) or the instance's role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3Config {
    /// Endpoint URL (`http://127.0.0.1:9000` for a local MinIO); `None` for AWS.
    pub endpoint: Option<String>,
    /// Bucket (must exist).
    pub bucket: String,
    /// Region (`us-east-1` when the service does not care).
    pub region: String,
    /// Key prefix of the pack objects, e.g. `cairn/` (empty: the bucket's root).
    pub prefix: String,
    /// Path-style addressing (`endpoint/bucket/key`), which MinIO and Garage need.
    pub path_style: bool,
    /// How long one request may take before it is retried.
    pub timeout: Duration,
    /// Retries of a failed request (5xx, timeouts, connection errors).
    pub max_retries: usize,
    /// Access key id and secret; `None`: from the environment.
    pub credentials: Option<(String, String)>,
    /// Total time retries of one request may take.
    pub retry_timeout: Duration,
}

impl S3Config {
    /// A configuration for `bucket` with the defaults: AWS endpoint, region `us-east-1`, no
    /// prefix, path-style addressing, 60 s per request, 20 retries within 5 minutes (with
    /// backoff from 0.2 s up to 10 s between them, enough to ride out a server restart).
    pub fn new(bucket: impl Into<String>) -> S3Config {
        S3Config {
            endpoint: None,
            bucket: bucket.into(),
            region: "us-east-1".into(),
            prefix: String::new(),
            path_style: true,
            timeout: Duration::from_secs(60),
            max_retries: 20,
            credentials: None,
            retry_timeout: Duration::from_secs(300),
        }
    }
}

/// Packs in an S3 bucket.
pub struct S3Backend {
    store: Arc<AmazonS3>,
    config: S3Config,
    rt: tokio::runtime::Runtime,
}

impl std::fmt::Debug for S3Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Backend").field("config", &self.config).finish_non_exhaustive()
    }
}

fn other(e: impl std::error::Error + Send + Sync + 'static) -> io::Error {
    io::Error::other(e)
}

fn to_io(e: object_store::Error) -> io::Error {
    match e {
        object_store::Error::NotFound { .. } => io::Error::new(io::ErrorKind::NotFound, e.to_string()),
        e => io::Error::other(e.to_string()),
    }
}

impl S3Backend {
    /// Connects (lazily: the first request checks the endpoint and credentials).
    pub fn new(config: S3Config) -> io::Result<S3Backend> {
        let mut b = AmazonS3Builder::from_env()
            .with_bucket_name(&config.bucket)
            .with_region(&config.region)
            .with_virtual_hosted_style_request(!config.path_style)
            .with_client_options(ClientOptions::new().with_timeout(config.timeout).with_allow_http(true))
            .with_retry(RetryConfig {
                backoff: BackoffConfig {
                    init_backoff: Duration::from_millis(200),
                    max_backoff: Duration::from_secs(10),
                    base: 2.0,
                },
                max_retries: config.max_retries,
                retry_timeout: config.retry_timeout,
            });
        if let Some(e) = &config.endpoint {
            b = b.with_endpoint(e);
        }
        if let Some((id, secret)) = &config.credentials {
            b = b.with_access_key_id(id).with_secret_access_key(secret);
        }
        let store = Arc::new(b.build().map_err(other)?);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("cairn-s3")
            .enable_all()
            .build()?;
        Ok(S3Backend { store, config, rt })
    }

    fn key(&self, no: u64) -> ObjectPath {
        ObjectPath::from(format!("{}{}", self.config.prefix, pack::pack_name(no, "pack")))
    }

    /// Runs `f` on this backend's runtime, also from a thread that is inside another runtime.
    fn run<F: Future + Send>(&self, f: F) -> F::Output
    where
        F::Output: Send,
    {
        if tokio::runtime::Handle::try_current().is_ok() {
            std::thread::scope(|s| s.spawn(|| self.rt.block_on(f)).join().expect("S3 request thread panicked"))
        } else {
            self.rt.block_on(f)
        }
    }
}

impl Backend for S3Backend {
    fn location(&self) -> String {
        format!("s3://{}/{}", self.config.bucket, self.config.prefix)
    }

    fn upload(&self, no: u64, path: &Path) -> io::Result<()> {
        let data = std::fs::read(path)?;
        let key = self.key(no);
        self.run(async {
            if data.len() < PART {
                self.store.put(&key, PutPayload::from(data)).await.map_err(to_io)?;
                return Ok(());
            }
            let upload = self.store.put_multipart(&key).await.map_err(to_io)?;
            let mut w = WriteMultipart::new_with_chunk_size(upload, PART);
            for part in data.chunks(PART) {
                w.wait_for_capacity(4).await.map_err(to_io)?;
                w.write(part);
            }
            w.finish().await.map_err(to_io)?;
            Ok(())
        })
    }

    fn download(&self, no: u64) -> io::Result<Vec<u8>> {
        let key = self.key(no);
        self.run(async {
            let r = self.store.get(&key).await.map_err(to_io)?;
            Ok(r.bytes().await.map_err(to_io)?.to_vec())
        })
    }

    fn read_at(&self, no: u64, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let key = self.key(no);
        let end = offset.checked_add(len as u64).ok_or(io::ErrorKind::InvalidInput)?;
        let b = self.run(async { self.store.get_range(&key, offset..end).await.map_err(to_io) })?;
        if b.len() != len {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, format!("short read of pack {no}")));
        }
        Ok(b.to_vec())
    }

    fn list(&self) -> io::Result<Vec<(u64, u64)>> {
        let prefix = (!self.config.prefix.is_empty()).then(|| ObjectPath::from(self.config.prefix.as_str()));
        let metas: Vec<object_store::ObjectMeta> =
            self.run(async { self.store.list(prefix.as_ref()).try_collect().await.map_err(to_io) })?;
        let mut out: Vec<(u64, u64)> = metas
            .iter()
            .filter_map(|m| {
                let name = m.location.filename()?;
                Some((pack::parse_pack_name(name)?, m.size))
            })
            .collect();
        out.sort_unstable();
        Ok(out)
    }

    fn delete(&self, no: u64) -> io::Result<()> {
        let key = self.key(no);
        match self.run(async { self.store.delete(&key).await }) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(to_io(e)),
        }
    }
}
