//! Medians over repetitions and the comparison table (Markdown, readable in a terminal too).

use std::fmt::Write as _;

use crate::runner::RunResult;

/// Medians of one (workload, threads, engine) over its repetitions.
#[derive(Clone, Debug)]
pub struct Row {
    /// Workload letter.
    pub workload: String,
    /// Client threads.
    pub threads: u64,
    /// Engine name.
    pub engine: String,
    /// Repetitions the medians are over.
    pub runs: usize,
    /// Run-phase ops per second.
    pub ops_per_sec: f64,
    /// (max - min) / median of ops per second over the repetitions.
    pub ops_spread: f64,
    /// Mean latency, µs.
    pub mean_us: f64,
    /// Median latency, µs.
    pub p50_us: f64,
    /// p99 latency, µs.
    pub p99_us: f64,
    /// p99.9 latency, µs.
    pub p999_us: f64,
    /// CPU µs per op.
    pub cpu_us_per_op: f64,
    /// Bytes written to storage per user byte.
    pub write_amp: f64,
    /// Space after close, MiB.
    pub space_mib: f64,
    /// Peak RSS, MiB.
    pub rss_mib: f64,
    /// Load inserts per second.
    pub load_ops_per_sec: f64,
}

/// The median (mean of the middle two for an even count); 0 for none.
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

/// Groups results by (workload, threads, engine) in first-seen order of workloads and threads
/// and in `engines` order, and takes medians.
pub fn summarize(results: &[RunResult], engines: &[String]) -> Vec<Row> {
    let mut keys: Vec<(String, u64)> = Vec::new();
    for r in results {
        let k = (r.workload.clone(), r.threads);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys.sort();
    let mut rows = Vec::new();
    for (workload, threads) in keys {
        for engine in engines {
            let runs: Vec<&RunResult> = results
                .iter()
                .filter(|r| r.workload == workload && r.threads == threads && &r.engine == engine)
                .collect();
            if runs.is_empty() {
                continue;
            }
            let m = |f: fn(&RunResult) -> f64| median(runs.iter().map(|r| f(r)).collect());
            rows.push(Row {
                workload: workload.clone(),
                threads,
                engine: engine.clone(),
                runs: runs.len(),
                ops_per_sec: m(|r| r.ops_per_sec),
                ops_spread: {
                    let v: Vec<f64> = runs.iter().map(|r| r.ops_per_sec).collect();
                    let (lo, hi) = v.iter().fold((f64::MAX, 0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
                    let med = m(|r| r.ops_per_sec);
                    if med > 0.0 { (hi - lo) / med } else { 0.0 }
                },
                mean_us: m(|r| r.mean_us),
                p50_us: m(|r| r.p50_us),
                p99_us: m(|r| r.p99_us),
                p999_us: m(|r| r.p999_us),
                cpu_us_per_op: m(|r| r.cpu_us_per_op),
                write_amp: m(|r| r.write_amp),
                space_mib: m(|r| r.space_bytes as f64 / (1 << 20) as f64),
                rss_mib: m(|r| r.peak_rss_bytes as f64 / (1 << 20) as f64),
                load_ops_per_sec: m(|r| r.load_ops_per_sec),
            });
        }
    }
    rows
}

fn fmt_rate(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2} M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1} K", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

fn fmt_us(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The comparison table in Markdown: medians per row, and cairn/peer ratios of throughput and
/// p99 latency against the `baseline` engine of the same workload and thread count.
pub fn table(rows: &[Row], baseline: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| wl | thr | engine | ops/s | spread | {baseline}/peer ops/s | mean µs | p50 µs | p99 µs | p99.9 µs | {baseline}/peer p99 | CPU µs/op | write amp | space MiB | peak RSS MiB | load ops/s | runs |"
    );
    let _ = writeln!(out, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let base = rows.iter().find(|b| b.workload == r.workload && b.threads == r.threads && b.engine == baseline);
        let (tput_ratio, p99_ratio) = match base {
            Some(b) if r.ops_per_sec > 0.0 && r.p99_us > 0.0 => {
                (format!("{:.2}x", b.ops_per_sec / r.ops_per_sec), format!("{:.2}x", b.p99_us / r.p99_us))
            }
            _ => ("-".into(), "-".into()),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.0}% | {} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.0} | {:.0} | {} | {} |",
            r.workload.to_uppercase(),
            r.threads,
            r.engine,
            fmt_rate(r.ops_per_sec),
            r.ops_spread * 100.0,
            tput_ratio,
            fmt_us(r.mean_us),
            fmt_us(r.p50_us),
            fmt_us(r.p99_us),
            fmt_us(r.p999_us),
            p99_ratio,
            r.cpu_us_per_op,
            r.write_amp,
            r.space_mib,
            r.rss_mib,
            fmt_rate(r.load_ops_per_sec),
            r.runs
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(vec![]), 0.0);
    }

    #[test]
    fn table_has_ratios() {
        let mk = |engine: &str, ops: f64, p99: f64| RunResult {
            engine: engine.into(),
            workload: "a".into(),
            threads: 1,
            ops_per_sec: ops,
            p99_us: p99,
            ..RunResult::default()
        };
        let results =
            vec![mk("cairn", 200.0, 10.0), mk("cairn", 100.0, 10.0), mk("cairn", 300.0, 10.0), mk("peer", 100.0, 20.0)];
        let rows = summarize(&results, &["cairn".into(), "peer".into()]);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].runs, 3);
        let t = table(&rows, "cairn");
        assert!(t.contains("| A | 1 | peer | 100 | 0% | 2.00x |"), "{t}");
        assert!(t.contains("| A | 1 | cairn | 200 | 100% | 1.00x |"), "{t}");
    }
}
