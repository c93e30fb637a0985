//! Record tables: create, list, drop, put, get, patch, delete, query, verify, indexes, and
//! atomic batches of conditional writes.

use std::io::BufRead;

use cairn_tables::Expect;
pub use cairn_tables::{IndexDef, IndexKind, QueryResult, Record, Schema, TableDef, id_from_text};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{Cairn, Call, Error, Result};

fn default_pk() -> String {
    "id".into()
}

/// Create a table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTableRequest {
    /// Table name (letters, digits, `_` and `-`).
    pub table: String,
    /// The primary-key attribute (default `id`).
    #[serde(default = "default_pk")]
    pub pk: String,
    /// Attribute types and required attributes, checked on every write.
    #[serde(default)]
    pub schema: Option<Schema>,
}

/// Names one table.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TableRequest {
    /// The table.
    pub table: String,
}

/// Every table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TablesResult {
    /// Their definitions, by name.
    pub tables: Vec<TableDef>,
}

/// A table dropped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DroppedResult {
    /// What was dropped (a table, or `table.index`).
    pub dropped: String,
}

/// Create or replace records.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PutRequest {
    /// The table.
    pub table: String,
    /// The records (JSON objects holding their primary key), each its own durable write.
    pub records: Vec<Value>,
    /// The key of the one record given: the record may leave its primary key out (it is set
    /// to this) but not contradict it.
    pub id: Option<Value>,
    /// Also read records as JSON lines from the call's standard input.
    pub stdin: bool,
    /// Refuse to replace existing records.
    pub if_absent: bool,
    /// Replace only a record at this version.
    pub if_version: Option<u64>,
}

/// The versions written, in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutResult {
    /// One version per record.
    pub versions: Vec<u64>,
}

/// Names one record.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RecordRequest {
    /// The table.
    pub table: String,
    /// The primary key.
    pub id: Value,
}

/// Merge-patch a record (RFC 7396).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PatchRequest {
    /// The table.
    pub table: String,
    /// The primary key.
    pub id: Value,
    /// The patch (a JSON object; null removes an attribute).
    pub patch: Value,
    /// Patch only a record at this version.
    pub if_version: Option<u64>,
}

/// Delete a record.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeleteRequest {
    /// The table.
    pub table: String,
    /// The primary key.
    pub id: Value,
    /// Delete only a record at this version.
    pub if_version: Option<u64>,
}

/// A record deleted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeletedResult {
    /// Its table.
    pub table: String,
    /// Its primary key.
    pub id: Value,
}

/// A FIQL query.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QueryRequest {
    /// The table.
    pub table: String,
    /// FIQL filter (none: every record).
    #[serde(default)]
    pub filter: Option<String>,
    /// Sort keys; `-` in front for descending.
    #[serde(default)]
    pub sort: Vec<String>,
    /// At most this many records.
    #[serde(default)]
    pub limit: Option<usize>,
    /// Skip this many first.
    #[serde(default)]
    pub offset: usize,
    /// Keep only these attributes (dotted paths).
    #[serde(default)]
    pub fields: Option<Vec<String>>,
}

/// What a table check found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableVerifyResult {
    /// The table.
    pub table: String,
    /// Records checked (every ready index agrees with them).
    pub records: u64,
}

/// Create a secondary index, filled from the records already stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateIndexRequest {
    /// The table.
    pub table: String,
    /// Index name.
    pub name: String,
    /// The attribute (dotted path; arrays index each element).
    pub attr: String,
    /// `hash` (equality) or `range` (default: equality, ranges, text prefixes).
    #[serde(default = "default_kind")]
    pub kind: IndexKind,
    /// Answer once the index is ready (default true).
    #[serde(default = "yes")]
    pub wait: bool,
}

fn default_kind() -> IndexKind {
    IndexKind::Range
}

fn yes() -> bool {
    true
}

/// A table's indexes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IndexesResult {
    /// The table.
    pub table: String,
    /// Its indexes.
    pub indexes: Vec<IndexDef>,
}

/// Drop an index.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DropIndexRequest {
    /// The table.
    pub table: String,
    /// The index.
    pub name: String,
}

/// One write of a batch. `version`: the version the record must be at (0: absent); without it
/// the write is unconditional.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
pub enum BatchWrite {
    /// Create or replace.
    Put {
        /// The table.
        table: String,
        /// The record.
        record: Value,
        /// Expected version.
        version: Option<u64>,
    },
    /// Create, refusing to replace.
    Insert {
        /// The table.
        table: String,
        /// The record.
        record: Value,
    },
    /// Merge-patch.
    Patch {
        /// The table.
        table: String,
        /// The primary key.
        id: Value,
        /// The patch.
        patch: Value,
        /// Expected version.
        version: Option<u64>,
    },
    /// Delete.
    Delete {
        /// The table.
        table: String,
        /// The primary key.
        id: Value,
        /// Expected version.
        version: Option<u64>,
    },
}

/// Writes to records of any tables applied as one transaction: all land, or none.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BatchRequest {
    /// The writes, in order.
    pub writes: Vec<BatchWrite>,
}

/// What each write of a batch did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchResult {
    /// One result per write: `{"version": N}` (put, insert), the record (patch),
    /// `{"deleted": bool}` (delete).
    pub results: Vec<Value>,
}

fn expect(version: Option<u64>) -> Expect {
    version.map_or(Expect::Any, Expect::Version)
}

impl Cairn {
    /// Creates a table.
    pub fn create_table(&self, req: CreateTableRequest, call: &Call<'_>) -> Result<TableDef> {
        call.access.check_write("table create")?;
        Ok(self.tables(true)?.create_table(&req.table, &req.pk, req.schema)?)
    }

    /// Every table.
    pub fn list_tables(&self) -> Result<TablesResult> {
        Ok(TablesResult { tables: self.tables(false)?.list()? })
    }

    /// Drops a table with its records and indexes.
    pub fn drop_table(&self, req: TableRequest, call: &Call<'_>) -> Result<DroppedResult> {
        call.access.check_write("table drop")?;
        self.tables(false)?.drop_table(&req.table)?;
        Ok(DroppedResult { dropped: req.table })
    }

    /// Creates or replaces records, each its own durable write.
    pub fn put_records(&self, req: PutRequest, call: &mut Call<'_>) -> Result<PutResult> {
        call.access.check_write("table put")?;
        if req.if_absent && req.if_version.is_some() {
            return Err(Error::bad_request("give at most one of if_absent and if_version"));
        }
        let t = self.tables(false)?;
        let e = if req.if_absent { Expect::Absent } else { expect(req.if_version) };
        let mut records = req.records;
        if let Some(key) = &req.id {
            let [rec] = records.as_mut_slice() else {
                return Err(Error::bad_request("a key names exactly one record"));
            };
            let pk = t.table(&req.table)?.pk;
            match rec.as_object_mut() {
                Some(o) => match o.get(&pk) {
                    None => {
                        o.insert(pk, key.clone());
                    }
                    Some(v) if v == key => {}
                    Some(v) => return Err(Error::bad_request(format!("the record's {pk} {v} is not its key {key}"))),
                },
                None => return Err(Error::bad_request("a record must be a JSON object")),
            }
        }
        let mut versions = Vec::new();
        for rec in &records {
            versions.push(t.put_with(&req.table, rec, e)?);
        }
        if req.stdin {
            let input = call.input.take().ok_or_else(|| Error::bad_request("no standard input for `stdin`"))?;
            for (i, line) in std::io::BufReader::new(input).lines().enumerate() {
                let line = line.map_err(|e| Error::io(std::path::Path::new("<stdin>"), e))?;
                if line.trim().is_empty() {
                    continue;
                }
                let rec: Value = serde_json::from_str(&line)
                    .map_err(|err| Error::bad_request(format!("line {}: not JSON: {err}", i + 1)))?;
                versions.push(
                    t.put_with(&req.table, &rec, e)
                        .map_err(|err| Error::from(err).context(format!("line {}", i + 1)))?,
                );
            }
        }
        Ok(PutResult { versions })
    }

    /// A record.
    pub fn get_record(&self, req: RecordRequest) -> Result<Record> {
        self.tables(false)?
            .get(&req.table, &req.id)?
            .ok_or_else(|| Error::not_found(format!("no record {} in table {}", req.id, req.table)))
    }

    /// Merge-patches a record.
    pub fn patch_record(&self, req: PatchRequest, call: &Call<'_>) -> Result<Record> {
        call.access.check_write("table patch")?;
        Ok(self.tables(false)?.patch(&req.table, &req.id, &req.patch, req.if_version)?)
    }

    /// Deletes a record.
    pub fn delete_record(&self, req: DeleteRequest, call: &Call<'_>) -> Result<DeletedResult> {
        call.access.check_write("table rm")?;
        if !self.tables(false)?.delete(&req.table, &req.id, req.if_version)? {
            return Err(Error::not_found(format!("no record {} in table {}", req.id, req.table)));
        }
        Ok(DeletedResult { table: req.table, id: req.id })
    }

    /// Records matching a FIQL filter.
    pub fn query(&self, req: QueryRequest) -> Result<QueryResult> {
        let q = cairn_tables::Query {
            filter: req.filter,
            sort: req.sort,
            limit: req.limit,
            offset: req.offset,
            fields: req.fields,
        };
        Ok(self.tables(false)?.query(&req.table, &q)?)
    }

    /// Checks every ready index of a table against its records.
    pub fn verify_table(&self, req: TableRequest) -> Result<TableVerifyResult> {
        let records = self.tables(false)?.verify(&req.table)?;
        Ok(TableVerifyResult { table: req.table, records })
    }

    /// Creates an index.
    pub fn create_index(&self, req: CreateIndexRequest, call: &Call<'_>) -> Result<IndexDef> {
        call.access.check_write("index create")?;
        let t = self.tables(false)?;
        let ix = t.create_index(&req.table, &req.name, &req.attr, req.kind)?;
        if req.wait {
            t.wait_for_index(&req.table, &req.name)?;
            return Ok(IndexDef { ready: true, ..ix });
        }
        Ok(ix)
    }

    /// A table's indexes.
    pub fn list_indexes(&self, req: TableRequest) -> Result<IndexesResult> {
        let def = self.tables(false)?.table(&req.table)?;
        Ok(IndexesResult { table: req.table, indexes: def.indexes })
    }

    /// Drops an index.
    pub fn drop_index(&self, req: DropIndexRequest, call: &Call<'_>) -> Result<DroppedResult> {
        call.access.check_write("index drop")?;
        self.tables(false)?.drop_index(&req.table, &req.name)?;
        Ok(DroppedResult { dropped: format!("{}.{}", req.table, req.name) })
    }

    /// Applies writes to records of any tables as one transaction.
    pub fn batch(&self, req: BatchRequest, call: &Call<'_>) -> Result<BatchResult> {
        call.access.check_write("table batch")?;
        let mut at = 0;
        let results = self
            .tables(false)?
            .transaction(|tx| {
                let mut out = Vec::with_capacity(req.writes.len());
                for (i, w) in req.writes.iter().enumerate() {
                    at = i;
                    out.push(match w {
                        BatchWrite::Put { table, record, version } => {
                            json!({ "version": tx.put_with(table, record, expect(*version))? })
                        }
                        BatchWrite::Insert { table, record } => {
                            json!({ "version": tx.put_with(table, record, Expect::Absent)? })
                        }
                        BatchWrite::Patch { table, id, patch, version } => {
                            let r = tx.patch(table, id, patch, *version)?;
                            json!({ "version": r.version, "data": r.data })
                        }
                        BatchWrite::Delete { table, id, version } => {
                            json!({ "deleted": tx.delete(table, id, *version)? })
                        }
                    });
                }
                Ok(out)
            })
            .map_err(|e| Error::from(e).context(format!("write {at}")))?;
        Ok(BatchResult { results })
    }
}
