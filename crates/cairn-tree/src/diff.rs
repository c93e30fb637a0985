//! Differences between two snapshots, walking both trees at once and skipping every subtree
//! whose id is equal on both sides. A removed file whose content reappears as an added file is
//! reported as a rename.

use std::collections::HashMap;

use cairn_cas::Id;

use crate::object::{Entry, Kind};
use crate::{Result, Trees};

/// One difference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Present only in the second snapshot.
    Added(String),
    /// Present only in the first snapshot.
    Removed(String),
    /// Present in both with different content, kind or mode.
    Modified(String),
    /// Same content moved from the first path to the second.
    Renamed {
        /// Path in the first snapshot.
        from: String,
        /// Path in the second snapshot.
        to: String,
    },
}

impl Change {
    /// The path the change is about (the new path for renames).
    pub fn path(&self) -> &str {
        match self {
            Change::Added(p) | Change::Removed(p) | Change::Modified(p) => p,
            Change::Renamed { to, .. } => to,
        }
    }
}

fn join(prefix: &str, name: &[u8]) -> String {
    let n = String::from_utf8_lossy(name);
    if prefix.is_empty() { n.into_owned() } else { format!("{prefix}/{n}") }
}

impl Trees {
    /// Changes from snapshot `a` to snapshot `b`, sorted by path.
    pub fn diff(&self, a: &str, b: &str) -> Result<Vec<Change>> {
        let (ra, rb) = (self.snapshot_info(a)?.root, self.snapshot_info(b)?.root);
        let mut added = Vec::new();
        let mut removed = Vec::new();
        let mut modified = Vec::new();
        self.diff_trees(Some(&ra), Some(&rb), "", &mut added, &mut removed, &mut modified)?;
        // Pair removed and added files with equal content as renames.
        let mut gone: HashMap<Id, Vec<String>> = HashMap::new();
        let mut out = Vec::new();
        for (p, id, kind) in removed.iter() {
            if *kind == Kind::File {
                gone.entry(*id).or_default().push(p.clone());
            }
        }
        let mut renamed_from = std::collections::HashSet::new();
        for (p, id, kind) in &added {
            let from = (*kind == Kind::File).then(|| gone.get_mut(id).and_then(|v| v.pop())).flatten();
            match from {
                Some(from) => {
                    renamed_from.insert(from.clone());
                    out.push(Change::Renamed { from, to: p.clone() });
                }
                None => out.push(Change::Added(p.clone())),
            }
        }
        for (p, _, _) in removed {
            if !renamed_from.contains(&p) {
                out.push(Change::Removed(p));
            }
        }
        out.extend(modified.into_iter().map(Change::Modified));
        out.sort_by(|x, y| x.path().cmp(y.path()));
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)]
    fn diff_trees(
        &self,
        a: Option<&Id>,
        b: Option<&Id>,
        prefix: &str,
        added: &mut Vec<(String, Id, Kind)>,
        removed: &mut Vec<(String, Id, Kind)>,
        modified: &mut Vec<String>,
    ) -> Result<()> {
        if a.is_some() && a == b {
            return Ok(());
        }
        let ea = match a {
            Some(id) => self.read_tree(id)?,
            None => Vec::new(),
        };
        let eb = match b {
            Some(id) => self.read_tree(id)?,
            None => Vec::new(),
        };
        let (mut i, mut j) = (0, 0);
        while i < ea.len() || j < eb.len() {
            let ord = match (ea.get(i), eb.get(j)) {
                (Some(x), Some(y)) => x.name.cmp(&y.name),
                (Some(_), None) => std::cmp::Ordering::Less,
                _ => std::cmp::Ordering::Greater,
            };
            match ord {
                std::cmp::Ordering::Less => {
                    self.one_side(&ea[i], prefix, removed)?;
                    i += 1;
                }
                std::cmp::Ordering::Greater => {
                    self.one_side(&eb[j], prefix, added)?;
                    j += 1;
                }
                std::cmp::Ordering::Equal => {
                    let (x, y) = (&ea[i], &eb[j]);
                    let path = join(prefix, &x.name);
                    match (x.kind, y.kind) {
                        (Kind::Dir, Kind::Dir) => {
                            self.diff_trees(Some(&x.id), Some(&y.id), &path, added, removed, modified)?
                        }
                        (kx, ky) if kx == ky => {
                            if x.id != y.id || (x.mode & 0o111) != (y.mode & 0o111) {
                                modified.push(path);
                            }
                        }
                        _ => {
                            self.one_side(x, prefix, removed)?;
                            self.one_side(y, prefix, added)?;
                        }
                    }
                    i += 1;
                    j += 1;
                }
            }
        }
        Ok(())
    }

    /// Lists an entry present on one side only (a directory with everything under it).
    fn one_side(&self, e: &Entry, prefix: &str, out: &mut Vec<(String, Id, Kind)>) -> Result<()> {
        let path = join(prefix, &e.name);
        if e.kind == Kind::Dir {
            out.push((format!("{path}/"), e.id, Kind::Dir));
            for child in self.read_tree(&e.id)? {
                self.one_side(&child, &path, out)?;
            }
        } else {
            out.push((path, e.id, e.kind));
        }
        Ok(())
    }
}
