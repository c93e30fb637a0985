//! Every operation as one request type and one response type, so front-ends can carry any
//! request (the daemon's IPC sends them as JSON) and print any result the same way.
//!
//! A request's JSON is its fields with an `op` tag (`{"op": "search", "query": "x"}`); a
//! response's JSON, as every front-end prints it, is the result's own fields
//! ([`Response::to_json`]); on the wire a response also carries its variant name so it
//! decodes back into the right type.

use serde::{Deserialize, Serialize};

use crate::{Cairn, Call, Result, docs, kv, model, repair, tables, trees, verify};

macro_rules! operations {
    ($( $(#[$doc:meta])* $variant:ident ( $req:ty ) => $res:ty, |$c:ident, $r:ident, $call:ident| $body:expr; )*) => {
        /// Any operation.
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "op", rename_all = "snake_case")]
        #[allow(clippy::large_enum_variant)]
        pub enum Request {
            $( $(#[$doc])* $variant($req), )*
        }

        /// Any operation's result.
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        #[allow(clippy::large_enum_variant)]
        pub enum Response {
            $( $(#[$doc])* $variant($res), )*
        }

        impl Response {
            /// The result's JSON, as every front-end prints it.
            pub fn to_json(&self) -> serde_json::Value {
                let v = match self {
                    $( Response::$variant(r) => serde_json::to_value(r), )*
                };
                // The results are plain data; serializing them cannot fail.
                v.unwrap_or_else(|e| serde_json::json!({ "error": { "kind": "internal", "message": e.to_string() } }))
            }
        }

        impl Request {
            /// The operation's name (`search`, `table_query`, ...).
            pub fn op(&self) -> String {
                let camel = match self {
                    $( Request::$variant(_) => stringify!($variant), )*
                };
                snake(camel)
            }
        }

        pub(crate) fn execute(c: &Cairn, req: Request, call: &mut Call<'_>) -> Result<Response> {
            match req {
                $( Request::$variant($r) => { let $c = c; let $call = call; Ok(Response::$variant($body)) } )*
            }
        }
    };
}

fn snake(camel: &str) -> String {
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// An empty request (operations without arguments).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Nothing {}

operations! {
    /// Add documents.
    Add(docs::AddRequest) => docs::AddResult, |c, r, call| c.add(r, call)?;
    /// A document's versions.
    Versions(docs::VersionsRequest) => docs::VersionsResult, |c, r, call| c.versions(r, call)?;
    /// A document's record.
    Get(docs::GetRequest) => docs::GetResult, |c, r, call| c.get(r, call)?;
    /// A document's content in JSON.
    Content(docs::ContentRequest) => docs::ContentResult, |c, r, call| c.content(r, call)?;
    /// Write a document's content to a file.
    Restore(docs::RestoreRequest) => docs::RestoreResult, |c, r, call| c.restore(r, call)?;
    /// List documents.
    Ls(docs::LsRequest) => docs::LsResult, |c, r, _call| c.ls(r)?;
    /// Remove documents.
    Rm(docs::RmRequest) => docs::RmResult, |c, r, call| c.rm(r, call)?;
    /// Add and remove tags.
    Tag(docs::TagRequest) => docs::UpdatedResult, |c, r, call| c.tag(r, call)?;
    /// Set and remove metadata.
    MetaSet(docs::MetaSetRequest) => docs::UpdatedResult, |c, r, call| c.meta_set(r, call)?;
    /// A document's metadata.
    MetaGet(docs::MetaGetRequest) => docs::MetaResult, |c, r, call| c.meta_get(r, call)?;
    /// Full-text search.
    Search(docs::SearchRequest) => docs::SearchResult, |c, r, _call| c.search(r)?;
    /// Regular-expression search.
    Grep(docs::GrepRequest) => docs::GrepResult, |c, r, _call| c.grep(r)?;
    /// Install an embedding model.
    ModelInstall(model::ModelInstallRequest) => model::ModelInstallResult, |c, r, call| c.model_install(r, call)?;
    /// The installed embedding model and how far embedding is.
    ModelStatus(model::ModelStatusRequest) => model::ModelStatusResult, |c, r, _call| c.model_status(r)?;
    /// Rebuild the full-text index.
    Reindex(Nothing) => docs::ReindexResult, |c, _r, call| c.reindex(call)?;
    /// Snapshot a directory.
    Snapshot(trees::SnapshotRequest) => trees::SnapshotResult, |c, r, call| c.snapshot(r, call)?;
    /// Materialize a snapshot.
    Checkout(trees::CheckoutRequest) => trees::CheckoutResult, |c, r, call| c.checkout(r, call)?;
    /// Differences between snapshots.
    Diff(trees::DiffRequest) => trees::DiffResult, |c, r, _call| c.diff(r)?;
    /// Every snapshot.
    Snapshots(Nothing) => trees::SnapshotsResult, |c, _r, _call| c.snapshots()?;
    /// Remove snapshots.
    RmSnapshot(trees::RmSnapshotRequest) => trees::RmSnapshotResult, |c, r, call| c.rm_snapshot(r, call)?;
    /// Free what no snapshot needs.
    Gc(Nothing) => trees::GcResult, |c, _r, call| c.gc(call)?;
    /// Disk usage.
    Du(trees::DuRequest) => trees::DuResult, |c, r, _call| c.du(r)?;
    /// Check every layer.
    Verify(verify::VerifyRequest) => verify::VerifyReport, |c, r, _call| c.verify(r)?;
    /// Rebuild what is derivable, store damaged content again from sources, say what is lost.
    Repair(repair::RepairRequest) => repair::RepairReport, |c, r, call| c.repair(r, call)?;
    /// Create a table.
    TableCreate(tables::CreateTableRequest) => cairn_tables::TableDef, |c, r, call| c.create_table(r, call)?;
    /// Every table.
    TableLs(Nothing) => tables::TablesResult, |c, _r, _call| c.list_tables()?;
    /// Drop a table.
    TableDrop(tables::TableRequest) => tables::DroppedResult, |c, r, call| c.drop_table(r, call)?;
    /// Create or replace records.
    TablePut(tables::PutRequest) => tables::PutResult, |c, r, call| c.put_records(r, call)?;
    /// A record.
    TableGet(tables::RecordRequest) => cairn_tables::Record, |c, r, _call| c.get_record(r)?;
    /// Merge-patch a record.
    TablePatch(tables::PatchRequest) => cairn_tables::Record, |c, r, call| c.patch_record(r, call)?;
    /// Delete a record.
    TableRm(tables::DeleteRequest) => tables::DeletedResult, |c, r, call| c.delete_record(r, call)?;
    /// Query a table.
    TableQuery(tables::QueryRequest) => cairn_tables::QueryResult, |c, r, _call| c.query(r)?;
    /// Check a table's indexes.
    TableVerify(tables::TableRequest) => tables::TableVerifyResult, |c, r, _call| c.verify_table(r)?;
    /// Writes to several records as one transaction.
    TableBatch(tables::BatchRequest) => tables::BatchResult, |c, r, call| c.batch(r, call)?;
    /// Create an index.
    IndexCreate(tables::CreateIndexRequest) => cairn_tables::IndexDef, |c, r, call| c.create_index(r, call)?;
    /// A table's indexes.
    IndexLs(tables::TableRequest) => tables::IndexesResult, |c, r, _call| c.list_indexes(r)?;
    /// Drop an index.
    IndexDrop(tables::DropIndexRequest) => tables::DroppedResult, |c, r, call| c.drop_index(r, call)?;
    /// Set a key.
    KvPut(kv::PutRequest) => kv::DoneResult, |c, r, call| c.kv_put(r, call)?;
    /// A key's value.
    KvGet(kv::KeyRequest) => kv::Row, |c, r, _call| c.kv_get(r)?;
    /// Delete a key.
    KvDelete(kv::KeyRequest) => kv::DoneResult, |c, r, call| c.kv_delete(r, call)?;
    /// Delete a range of keys.
    KvDeleteRange(kv::DeleteRangeRequest) => kv::DoneResult, |c, r, call| c.kv_delete_range(r, call)?;
    /// Keys in order.
    KvScan(kv::ScanRequest) => kv::ScanResult, |c, r, _call| c.kv_scan(r)?;
    /// Load JSON lines.
    KvLoad(kv::LoadRequest) => kv::LoadResult, |c, r, call| c.kv_load(r, call)?;
    /// Engine statistics.
    KvStats(Nothing) => kv::StatsResult, |c, _r, _call| c.kv_stats()?;
    /// Compact the engine.
    KvCompact(Nothing) => kv::DoneResult, |c, _r, call| c.kv_compact(call)?;
    /// Check every table checksum of the engine.
    KvVerify(Nothing) => kv::KvVerifyResult, |c, _r, _call| c.kv_verify()?;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_tagged_json() {
        let r: Request = serde_json::from_str(r#"{"op": "search", "query": "x", "limit": 3}"#).unwrap();
        let Request::Search(s) = &r else { panic!("{r:?}") };
        assert_eq!((s.query.as_str(), s.limit, s.snippets), ("x", 3, true));
        assert_eq!(r.op(), "search");
        assert_eq!(Request::TableLs(Nothing {}).op(), "table_ls");
        let back: Request = serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
        assert_eq!(back, r);
        assert!(serde_json::from_str::<Request>(r#"{"op": "search", "query": "x", "lmit": 3}"#).is_err());
        assert!(serde_json::from_str::<Request>(r#"{"op": "table_ls"}"#).is_ok());
    }
}
