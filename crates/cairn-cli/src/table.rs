//! `cairn table ...`: JSON record tables with secondary indexes and FIQL queries.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use cairn_tables::{IndexKind, Query, Schema};
use clap::Subcommand;
use serde_json::{Value, json};

use crate::ctx::Ctx;

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
    Ls {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Drop a table with its records and indexes.
    Drop {
        /// Table name.
        table: String,
    },
    /// Create or replace records: one JSON object, or JSON lines from standard input (`-` or
    /// no argument).
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
    /// Print a record (JSON, with its version under `--json`).
    Get {
        /// Table name.
        table: String,
        /// Primary key: an integer, or text (a JSON string like '"42"' for text digits).
        id: String,
        /// Print {"version": N, "data": {...}}.
        #[arg(long)]
        json: bool,
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

fn parse_json(what: &str, s: &str) -> Result<Value> {
    serde_json::from_str(s).with_context(|| format!("{what} is not valid JSON"))
}

/// Runs a `cairn table` command.
pub fn run(ctx: &mut Ctx, cmd: TableCommand, out: &mut dyn Write) -> Result<()> {
    let t = ctx.tables()?;
    match cmd {
        TableCommand::Create { table, pk, schema } => {
            let schema: Option<Schema> = match schema {
                Some(p) => {
                    let p = ctx.abs(&p);
                    let text = std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
                    Some(serde_json::from_str(&text).with_context(|| format!("schema {}", p.display()))?)
                }
                None => None,
            };
            t.create_table(&table, &pk, schema)?;
            writeln!(out, "created table {table} (primary key {pk})")?;
        }
        TableCommand::Ls { json } => {
            for d in t.list()? {
                if json {
                    writeln!(out, "{}", serde_json::to_string(&d)?)?;
                } else {
                    let ix: Vec<String> = d
                        .indexes
                        .iter()
                        .map(|i| {
                            format!("{}({} {:?}{})", i.name, i.attr, i.kind, if i.ready { "" } else { ", building" })
                                .to_lowercase()
                        })
                        .collect();
                    writeln!(out, "{}\tpk={}\t{}", d.name, d.pk, ix.join(" "))?;
                }
            }
        }
        TableCommand::Drop { table } => {
            t.drop_table(&table)?;
            writeln!(out, "dropped table {table}")?;
        }
        TableCommand::Put { table, record, if_absent, if_version } => {
            let one = |rec: Value| -> Result<u64> {
                let r = if if_absent {
                    t.insert(&table, rec)?
                } else if let Some(v) = if_version {
                    t.put_if_version(&table, rec, v)?
                } else {
                    t.put(&table, rec)?
                };
                Ok(r.version)
            };
            match record.as_deref() {
                Some(r) if r != "-" => {
                    let v = one(parse_json("the record", r)?)?;
                    writeln!(out, "version {v}")?;
                }
                _ => {
                    // JSON lines, each its own durable write.
                    let mut n = 0u64;
                    for (i, line) in BufReader::new(&mut ctx.input).lines().enumerate() {
                        let line = line.context("reading standard input")?;
                        if line.trim().is_empty() {
                            continue;
                        }
                        let rec = parse_json(&format!("line {}", i + 1), &line)?;
                        one(rec).with_context(|| format!("line {}", i + 1))?;
                        n += 1;
                    }
                    writeln!(out, "{n} records written")?;
                }
            }
        }
        TableCommand::Get { table, id, json } => {
            let Some(r) = t.get(&table, &cairn_tables::id_from_text(&id))? else {
                bail!("no record {id} in table {table}")
            };
            if json {
                writeln!(out, "{}", json!({"version": r.version, "data": r.data}))?;
            } else {
                writeln!(out, "{}", r.data)?;
            }
        }
        TableCommand::Patch { table, id, patch, if_version } => {
            let r = t.patch(&table, &cairn_tables::id_from_text(&id), &parse_json("the patch", &patch)?, if_version)?;
            writeln!(out, "version {}", r.version)?;
        }
        TableCommand::Rm { table, id, if_version } => {
            if !t.delete(&table, &cairn_tables::id_from_text(&id), if_version)? {
                bail!("no record {id} in table {table}");
            }
        }
        TableCommand::Query { table, filter, sort, limit, offset, fields, explain } => {
            let r = t.query(&table, &Query { filter, sort, limit, offset, fields })?;
            for rec in &r.records {
                writeln!(out, "{rec}")?;
            }
            if explain {
                writeln!(ctx.err, "plan: {}; examined {}; returned {}", r.plan, r.examined, r.records.len())?;
            }
        }
        TableCommand::Verify { table } => {
            let n = t.verify(&table)?;
            writeln!(out, "table {table}: {n} records, every index consistent")?;
        }
        TableCommand::Index(IndexCommand::Create { table, name, attr, kind, no_wait }) => {
            let kind = if kind == "hash" { IndexKind::Hash } else { IndexKind::Range };
            t.create_index(&table, &name, &attr, kind)?;
            if no_wait {
                writeln!(out, "index {name} on {table}.{attr} is building")?;
            } else {
                t.wait_for_index(&table, &name)?;
                writeln!(out, "index {name} on {table}.{attr} is ready")?;
            }
        }
        TableCommand::Index(IndexCommand::Ls { table }) => {
            for i in t.table(&table)?.indexes {
                let state = if i.ready { "ready" } else { "building" };
                writeln!(out, "{}\t{}\t{}\t{state}", i.name, i.attr, format!("{:?}", i.kind).to_lowercase())?;
            }
        }
        TableCommand::Index(IndexCommand::Drop { table, name }) => {
            t.drop_index(&table, &name)?;
            writeln!(out, "dropped index {name}")?;
        }
    }
    Ok(())
}
