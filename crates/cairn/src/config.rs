//! `<dir>/cairn.toml`, read whole here: every section and key is known, and anything else is
//! an error naming the file, so a misspelt setting is never silently ignored.
//!
//! ```toml
//! [s3]        # sealed packs in a bucket; see cairn_cas::config for every key
//! bucket = "backups"
//! [packs]     # pack size, cache of uploaded packs, or packs in another file system
//! target_mb = 16
//! [server]    # the daemon (`cairn serve`)
//! token = "a secret of at least 16 bytes"        # TCP and HTTP clients send it (full access)
//! read_only_token = "another secret, 16 bytes+"  # clients with it may only read
//! roots = ["/home/me/projects"]  # remote clients snapshot, check out and restore only here
//! ```
//!
//! A top-level `token = "..."` (from earlier releases) is read as `server.token`.

use std::path::{Path, PathBuf};

use cairn_cas::config::{PacksTable, S3Table};
use serde::Deserialize;

use crate::{Error, Result};

/// Tokens shorter than this are refused (a guessable token is no protection).
pub const MIN_TOKEN_LEN: usize = 16;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct File {
    s3: Option<S3Table>,
    packs: Option<PacksTable>,
    server: Option<ServerTable>,
    token: Option<String>,
}

#[derive(Clone, Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ServerTable {
    token: Option<String>,
    read_only_token: Option<String>,
    roots: Option<Vec<PathBuf>>,
}

/// A data directory's configuration.
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// The `[s3]` table.
    pub s3: Option<S3Table>,
    /// The `[packs]` table.
    pub packs: Option<PacksTable>,
    /// The daemon's settings.
    pub server: ServerConfig,
    /// The file it came from, for messages.
    pub origin: String,
}

/// The daemon's settings (`[server]`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerConfig {
    /// Token granting full access to TCP and HTTP clients.
    pub token: Option<String>,
    /// Token granting read-only access.
    pub read_only_token: Option<String>,
    /// Where remote clients may snapshot, check out and restore (`None`: see
    /// [`crate::Access::remote`]).
    pub roots: Option<Vec<PathBuf>>,
}

impl Config {
    /// Parses the text of a configuration file; `origin` names it in errors and relative roots
    /// are resolved against `base` (the data directory).
    pub fn parse(text: &str, origin: &str, base: &Path) -> Result<Config> {
        let f: File = toml::from_str(text).map_err(|e| Error::bad_request(format!("{origin}: {e}")))?;
        let mut server = f.server.unwrap_or_default();
        match (f.token, &server.token) {
            (Some(_), Some(_)) => {
                return Err(Error::bad_request(format!("{origin}: `token` is given twice (top level and [server])")));
            }
            (Some(t), None) => server.token = Some(t),
            _ => {}
        }
        for (what, t) in [("token", &server.token), ("read_only_token", &server.read_only_token)] {
            if let Some(t) = t {
                check_token(t).map_err(|e| e.context(format!("{origin}: {what}")))?;
            }
        }
        if server.token.is_some() && server.token == server.read_only_token {
            return Err(Error::bad_request(format!("{origin}: token and read_only_token must differ")));
        }
        let roots = server.roots.map(|rs| rs.into_iter().map(|r| base.join(r)).collect());
        Ok(Config {
            s3: f.s3,
            packs: f.packs,
            server: ServerConfig { token: server.token, read_only_token: server.read_only_token, roots },
            origin: origin.to_string(),
        })
    }

    /// Reads `path` (no file: the defaults).
    pub fn load(path: &Path, base: &Path) -> Result<Config> {
        match std::fs::read_to_string(path) {
            Ok(text) => Config::parse(&text, &path.display().to_string(), base),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Ok(Config { origin: path.display().to_string(), ..Config::default() })
            }
            Err(e) => Err(Error::io(path, e)),
        }
    }
}

/// A token must be at least [`MIN_TOKEN_LEN`] bytes.
pub fn check_token(t: &str) -> Result<()> {
    if t.len() < MIN_TOKEN_LEN {
        return Err(Error::bad_request(format!(
            "a token must be at least {MIN_TOKEN_LEN} bytes (this one has {}); make one with \
             `head -c 24 /dev/urandom | base64`",
            t.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config> {
        Config::parse(text, "d/cairn.toml", Path::new("/d"))
    }

    #[test]
    fn every_section_is_read() {
        let c = parse(
            "[s3]\nbucket = \"b\"\n[packs]\ntarget_mb = 16\n[server]\ntoken = \"0123456789abcdef\"\n\
             read_only_token = \"fedcba9876543210\"\nroots = [\"/srv\", \"rel\"]\n",
        )
        .unwrap();
        assert!(c.s3.is_some() && c.packs.is_some());
        assert_eq!(c.server.token.as_deref(), Some("0123456789abcdef"));
        assert_eq!(c.server.read_only_token.as_deref(), Some("fedcba9876543210"));
        assert_eq!(c.server.roots, Some(vec![PathBuf::from("/srv"), PathBuf::from("/d/rel")]));
        let legacy = parse("token = \"0123456789abcdef\"\n").unwrap();
        assert_eq!(legacy.server.token.as_deref(), Some("0123456789abcdef"));
    }

    #[test]
    fn unknown_sections_and_keys_are_errors_naming_the_file() {
        for bad in [
            "[sever]\ntoken = \"0123456789abcdef\"\n",
            "tokn = \"x\"\n",
            "[server]\ntokn = \"0123456789abcdef\"\n",
            "[s3]\nbuckt = \"b\"\n",
            "[packs]\ntarget = 1\n",
            "[server]\nroots = \"/one\"\n",
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::BadRequest);
            assert!(e.to_string().contains("d/cairn.toml"), "{bad}: {e}");
        }
    }

    #[test]
    fn short_or_repeated_tokens_are_refused() {
        assert!(parse("token = \"short\"\n").unwrap_err().to_string().contains("at least 16 bytes"));
        assert!(parse("[server]\nread_only_token = \"short\"\n").is_err());
        assert!(parse("token = \"0123456789abcdef\"\n[server]\ntoken = \"0123456789abcdef\"\n").is_err());
        let same = "[server]\ntoken = \"0123456789abcdef\"\nread_only_token = \"0123456789abcdef\"\n";
        assert!(parse(same).is_err());
        assert!(check_token("0123456789abcdef").is_ok());
    }
}
