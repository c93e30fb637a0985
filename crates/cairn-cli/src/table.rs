//! `cairn table ...`: JSON record tables with secondary indexes and FIQL queries.

use std::path::PathBuf;

use cairn::tables::{self, IndexKind};
use cairn::{Error, Request};
use clap::Subcommand;
use serde_json::Value;

/// Subcommands of `cairn table`.
#[derive(Subcommand, Debug)]
pub enum TableCommand {
    /// Create a table.
    Create {
        /// Table name (letters, digits, _ and -).
        table: String,
        /// The primary-key attribute.
        #[arg(long, default_value = "id")]
        pk: String,
        /// A JSON schema file: {"attributes": {"name": {"type": "string", "required": true}},
        /// "strict": false}; types string, number, integer, boolean, object, array, any.
        #[arg(long)]
        schema: Option<PathBuf>,
    },
    /// List tables with their primary key and indexes.
    Ls,
    /// Drop a table with its records and indexes.
    Drop {
        /// Table name.
        table: String,
    },
    /// Create or replace records: one JSON object, or JSON lines from standard input (`-` or
    /// no argument), each its own durable write.
    Put {
        /// Table name.
        table: String,
        /// The record (a JSON object holding its primary key).
        record: Option<String>,
        /// Refuse to replace an existing record.
        #[arg(long, conflicts_with = "if_version")]
        if_absent: bool,
        /// Replace only if the stored record is at this version.
        #[arg(long)]
        if_version: Option<u64>,
    },
    /// Print a record (its data; with `--json`, `{"version": N, "data": {...}}`).
    Get {
        /// Table name.
        table: String,
        /// Primary key: an integer, or text (a JSON string like '"42"' for text digits).
        id: String,
    },
    /// Merge-patch a record (RFC 7396: null removes an attribute).
    Patch {
        /// Table name.
        table: String,
        /// Primary key.
        id: String,
        /// The patch (a JSON object).
        patch: String,
        /// Patch only if the stored record is at this version.
        #[arg(long)]
        if_version: Option<u64>,
    },
    /// Delete a record.
    Rm {
        /// Table name.
        table: String,
        /// Primary key.
        id: String,
        /// Delete only if the stored record is at this version.
        #[arg(long)]
        if_version: Option<u64>,
    },
    /// Print the records matching a FIQL filter as JSON lines, e.g.
    /// `cairn table query people 'age=ge=30;city==Oslo' --sort -age --limit 10`.
    Query {
        /// Table name.
        table: String,
        /// FIQL filter (`==`, `!=`, `=lt=`, `=le=`, `=gt=`, `=ge=`, `=in=`, `=out=`, `*`
        /// wildcards, `;` and, `,` or, parentheses). None: every record.
        filter: Option<String>,
        /// Sort keys, comma-separated; `-` in front for descending.
        #[arg(long, value_delimiter = ',', allow_hyphen_values = true)]
        sort: Vec<String>,
        /// At most this many records.
        #[arg(long, short = 'n')]
        limit: Option<usize>,
        /// Skip this many first.
        #[arg(long, default_value_t = 0)]
        offset: usize,
        /// Keep only these attributes (comma-separated dotted paths).
        #[arg(long, value_delimiter = ',')]
        fields: Option<Vec<String>>,
        /// Print the plan (index or scan) and the number of records examined on stderr.
        #[arg(long)]
        explain: bool,
    },
    /// Check every index against the records.
    Verify {
        /// Table name.
        table: String,
    },
    /// Secondary indexes.
    #[command(subcommand)]
    Index(IndexCommand),
}

/// Subcommands of `cairn table index`.
#[derive(Subcommand, Debug)]
pub enum IndexCommand {
    /// Create an index and fill it from the records already stored.
    Create {
        /// Table name.
        table: String,
        /// Index name.
        name: String,
        /// The attribute (dotted path; arrays index each element).
        attr: String,
        /// hash (equality) or range (equality, ranges, text prefixes).
        #[arg(long, default_value = "range", value_parser = ["hash", "range"])]
        kind: String,
        /// Return at once; the index fills in the background (in the daemon) and queries use it
        /// once ready. Embedded, an unfinished build resumes on the next command.
        #[arg(long)]
        no_wait: bool,
    },
    /// List a table's indexes.
    Ls {
        /// Table name.
        table: String,
    },
    /// Drop an index.
    Drop {
        /// Table name.
        table: String,
        /// Index name.
        name: String,
    },
}

fn parse_json(what: &str, s: &str) -> cairn::Result<Value> {
    serde_json::from_str(s).map_err(|e| Error::bad_request(format!("{what} is not valid JSON: {e}")))
}

/// Whether a query asked for its plan on stderr.
pub fn explains(cmd: &TableCommand) -> bool {
    matches!(cmd, TableCommand::Query { explain: true, .. })
}

impl TableCommand {
    /// The request this command makes, and whether it reads standard input.
    pub fn plan(self) -> cairn::Result<(Request, bool)> {
        let id = |s: &str| tables::id_from_text(s);
        Ok(match self {
            TableCommand::Create { table, pk, schema } => {
                let schema = match schema {
                    Some(p) => {
                        let text = std::fs::read_to_string(&p).map_err(|e| Error::io(&p, e))?;
                        Some(
                            serde_json::from_str(&text)
                                .map_err(|e| Error::bad_request(format!("schema {}: {e}", p.display())))?,
                        )
                    }
                    None => None,
                };
                (Request::TableCreate(tables::CreateTableRequest { table, pk, schema }), false)
            }
            TableCommand::Ls => (Request::TableLs(Default::default()), false),
            TableCommand::Drop { table } => (Request::TableDrop(tables::TableRequest { table }), false),
            TableCommand::Put { table, record, if_absent, if_version } => {
                let (records, stdin) = match record.as_deref() {
                    Some(r) if r != "-" => (vec![parse_json("the record", r)?], false),
                    _ => (Vec::new(), true),
                };
                let req = tables::PutRequest { table, records, id: None, stdin, if_absent, if_version };
                (Request::TablePut(req), stdin)
            }
            TableCommand::Get { table, id: key } => {
                (Request::TableGet(tables::RecordRequest { table, id: id(&key) }), false)
            }
            TableCommand::Patch { table, id: key, patch, if_version } => (
                Request::TablePatch(tables::PatchRequest {
                    table,
                    id: id(&key),
                    patch: parse_json("the patch", &patch)?,
                    if_version,
                }),
                false,
            ),
            TableCommand::Rm { table, id: key, if_version } => {
                (Request::TableRm(tables::DeleteRequest { table, id: id(&key), if_version }), false)
            }
            TableCommand::Query { table, filter, sort, limit, offset, fields, explain: _ } => {
                (Request::TableQuery(tables::QueryRequest { table, filter, sort, limit, offset, fields }), false)
            }
            TableCommand::Verify { table } => (Request::TableVerify(tables::TableRequest { table }), false),
            TableCommand::Index(IndexCommand::Create { table, name, attr, kind, no_wait }) => {
                let kind = if kind == "hash" { IndexKind::Hash } else { IndexKind::Range };
                let req = tables::CreateIndexRequest { table, name, attr, kind, wait: !no_wait };
                (Request::IndexCreate(req), false)
            }
            TableCommand::Index(IndexCommand::Ls { table }) => {
                (Request::IndexLs(tables::TableRequest { table }), false)
            }
            TableCommand::Index(IndexCommand::Drop { table, name }) => {
                (Request::IndexDrop(tables::DropIndexRequest { table, name }), false)
            }
        })
    }
}
