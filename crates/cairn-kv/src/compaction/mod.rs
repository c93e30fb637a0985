//! Leveled compaction: choosing what to compact ([`picker`]: level-0 weight and level byte
//! budgets; within a level, the table with the least overlap below), running it ([`job`]:
//! merging the chosen tables into the next level), and writing sorted output into tables
//! ([`output`], which memtable flushes use too).

pub mod output;
pub mod picker;
pub mod state;

#[cfg(test)]
use picker::{LevelTargets, catch_up_rate, intra_l0_span, least_overlap, pick};
#[cfg(test)]
use state::{Compacting, MergeProgress};

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Arc;
    use std::sync::atomic::AtomicU64;
    use std::time::{Duration, Instant};

    use super::{Compacting, LevelTargets, MergeProgress, catch_up_rate, intra_l0_span, least_overlap, pick};
    use crate::Options;
    use crate::cache::BlockCache;
    use crate::storage::Storage;
    use crate::table::table_cache::TableCache;
    use crate::version::{Cleaner, Version, test_table as table};

    fn cleaner() -> Arc<Cleaner> {
        let storage: Arc<dyn Storage> = Arc::new(crate::MemStorage::new());
        let dir = std::path::PathBuf::from("/t");
        let table_cache =
            Arc::new(TableCache::new(storage.clone(), dir.clone(), 8, Arc::new(BlockCache::new(1 << 20))));
        Cleaner::new(storage, dir, table_cache)
    }

    /// Options whose dynamic targets put a 10,000-byte bottom level (3) under a level 2 of
    /// 1,000 and a base level 1 of 100 bytes.
    fn tiny_levels() -> Options {
        Options {
            num_levels: 4,
            max_bytes_for_level_base: 100,
            level_size_multiplier: 10,
            dynamic_level_bytes: true,
            level0_compaction_trigger: 4,
            level0_slowdown_trigger: 20,
            ..Options::default()
        }
    }

    /// (level, output level, input tables) of what `pick` chooses.
    fn picked(opts: &Options, v: &Version, cs: &mut Compacting) -> Option<(usize, usize, Vec<u64>)> {
        pick(opts, v, cs).map(|c| (c.level, c.output_level, c.all().map(|f| f.no()).collect()))
    }

    #[test]
    fn level_0_bigger_than_the_base_level_goes_first_and_keeps_the_base_level_for_itself() {
        let (cleaner, opts) = (cleaner(), tiny_levels());
        let mut v = Version::empty(4);
        v.levels[3] = vec![table(&cleaner, 30, "a", "z", 10_000)];
        // The base level, 5x over its target of 100.
        v.levels[1] = vec![table(&cleaner, 10, "a", "h", 250), table(&cleaner, 11, "i", "z", 250)];
        assert_eq!(LevelTargets::new(&opts, &v).base, 1);
        assert_eq!(picked(&opts, &v, &mut Compacting::new(4)), Some((1, 2, vec![10])));
        // Two level-0 tables, half the file-count trigger, but more bytes than the base level:
        // level 0 goes first.
        v.levels[0] = vec![table(&cleaner, 1, "a", "z", 300), table(&cleaner, 2, "a", "z", 300)];
        assert_eq!(picked(&opts, &v, &mut Compacting::new(4)), Some((0, 1, vec![1, 2, 10, 11])));
        // Its progress is followed, against the entries of all four tables (one each here).
        let mut cs = Compacting::new(4);
        let c = pick(&opts, &v, &mut cs).unwrap();
        let progress = c.progress.as_ref().unwrap();
        assert!(Arc::ptr_eq(progress, cs.l0_merge.as_ref().unwrap()));
        assert_eq!(progress.total, 4);
        // With a base-level table held by a running compaction, level 0 cannot go (and two
        // tables are too few to merge among themselves); the base level's other table must not
        // start a compaction of its own either, or level 0 would wait behind one after another.
        let mut cs = Compacting::new(4);
        cs.tables.insert(11);
        cs.running = 1;
        assert_eq!(picked(&opts, &v, &mut cs), None);
        // The same while an intra-level-0 merge holds the newest level-0 tables.
        v.levels[0].insert(0, table(&cleaner, 3, "a", "z", 10));
        let mut cs = Compacting::new(4);
        cs.tables.insert(3);
        (cs.intra_l0, cs.running) = (true, 1);
        assert_eq!(picked(&opts, &v, &mut cs), None);
        // A level 0 smaller than the base level, below its file-count trigger: the base level
        // compacts.
        v.levels[0] = vec![table(&cleaner, 1, "a", "z", 30)];
        assert_eq!(picked(&opts, &v, &mut Compacting::new(4)), Some((1, 2, vec![10])));
    }

    #[test]
    fn writes_are_held_only_as_much_as_the_running_level_0_merge_needs() {
        let (cleaner, opts) = (cleaner(), Options { memtable_size: 1_000, ..tiny_levels() });
        assert_eq!((opts.level0_slowdown_trigger, opts.level0_stop_trigger), (20, 36));
        let mut v = Version::empty(4);
        v.levels[3] = vec![table(&cleaner, 30, "a", "z", 100_000)];
        // Eighteen level-0 tables being merged into the base level, two flushes since.
        v.levels[0] = (1..=20).rev().map(|no| table(&cleaner, no, "a", "z", 100)).collect();
        let mut cs = Compacting::new(4);
        cs.tables.extend((1..=18).chain([30]));
        (cs.l0, cs.running) = (true, 1);
        let merge = |secs: u64, read: u64, level0: std::ops::RangeInclusive<u64>| {
            let started = Instant::now().checked_sub(Duration::from_secs(secs)).unwrap();
            let level0 = level0.collect();
            Some(Arc::new(MergeProgress { started, total: 1_000, read: AtomicU64::new(read), level0 }))
        };
        // No merge, or too early to tell how long it needs: no rate.
        assert_eq!(catch_up_rate(&opts, &v, &cs, 1), 0);
        cs.l0_merge = merge(10, 19, 1..=18);
        assert_eq!(catch_up_rate(&opts, &v, &cs, 1), 0);
        cs.l0_merge = merge(0, 0, 1..=18);
        assert_eq!(catch_up_rate(&opts, &v, &cs, 1), 0);
        // Half done in 10 s: 10 s left. Room before the stop trigger: 36 - 21 = 15 flushes;
        // after the merge, 20 - 3 = 17; one memtable not yet flushed: 14 memtables in 10 s.
        cs.l0_merge = merge(10, 500, 1..=18);
        let rate = catch_up_rate(&opts, &v, &cs, 1);
        assert!((1_390..=1_400).contains(&rate), "{rate}");
        // Three memtables waiting for their flush: 12 in 10 s.
        let rate = catch_up_rate(&opts, &v, &cs, 3);
        assert!((1_190..=1_200).contains(&rate), "{rate}");
        // Flushes that compress to half the memtable's bytes: each memtable's worth of writes
        // adds half a memtable's worth to level 0, so twice the writes fit; a tenth is taken
        // as a quarter.
        cs.flush_ratio = 0.5;
        let rate = catch_up_rate(&opts, &v, &cs, 1);
        assert!((2_780..=2_800).contains(&rate), "{rate}");
        cs.flush_ratio = 0.1;
        let rate = catch_up_rate(&opts, &v, &cs, 1);
        assert!((5_560..=5_600).contains(&rate), "{rate}");
        cs.flush_ratio = 1.0;
        // A quarter done in 10 s: 30 s left.
        cs.l0_merge = merge(10, 250, 1..=18);
        let rate = catch_up_rate(&opts, &v, &cs, 1);
        assert!((463..=467).contains(&rate), "{rate}");
        // Level 0 weighs its bytes: the two new tables hold 5 memtables' worth, so the room
        // after the merge binds (20 - 6 = 14, less one memtable).
        v.levels[0][0] = table(&cleaner, 20, "a", "z", 4_500);
        cs.l0_merge = merge(10, 500, 1..=18);
        let rate = catch_up_rate(&opts, &v, &cs, 1);
        assert!((1_290..=1_300).contains(&rate), "{rate}");
        // Most of level 0 is new flushes: the merge ending leaves 18 tables, but intra-level-0
        // merges fold them, so they weigh what those leave, 4 + 2 = 6 tables (their bytes,
        // 1,800, are 2 memtables' worth): 20 - 7 = 13 after the merge, 15 before the stop
        // trigger, less one memtable: 12 in 10 s.
        v.levels[0] = (1..=20).rev().map(|no| table(&cleaner, no, "a", "z", 100)).collect();
        cs.tables = (1..=8).chain([30]).collect();
        cs.l0_merge = merge(10, 500, 1..=2);
        let rate = catch_up_rate(&opts, &v, &cs, 1);
        assert!((1_190..=1_200).contains(&rate), "{rate}");
        // The same tables holding 19 memtables' worth of bytes: the merge ending leaves level 0
        // at the slowdown trigger (19 + 1), so there is no room.
        v.levels[0] = (1..=20).rev().map(|no| table(&cleaner, no, "a", "z", 1_050)).collect();
        assert_eq!(catch_up_rate(&opts, &v, &cs, 1), 0);
        // Level 0 one table short of the stop trigger: no room.
        v.levels[0] = (1..=35).rev().map(|no| table(&cleaner, no, "a", "z", 100)).collect();
        cs.tables = (1..=30).collect();
        cs.l0_merge = merge(10, 500, 1..=30);
        assert_eq!(catch_up_rate(&opts, &v, &cs, 0), 0);
    }

    #[test]
    fn a_thread_is_kept_for_level_0_while_a_big_level_0_merges_into_the_base_level() {
        let (cleaner, opts) = (cleaner(), tiny_levels());
        let mut v = Version::empty(4);
        v.levels[3] = vec![table(&cleaner, 30, "a", "h", 5_000), table(&cleaner, 31, "i", "z", 5_000)];
        // Level 2, three times over its target of 1,000, with a table free to go down.
        v.levels[2] = vec![table(&cleaner, 20, "a", "h", 1_500), table(&cleaner, 21, "i", "z", 1_500)];
        v.levels[1] = vec![table(&cleaner, 10, "a", "z", 50)];
        // Twelve level-0 tables (the urgent weight: halfway from 4 to 20) all being merged
        // into the base level.
        v.levels[0] = (1..=12).rev().map(|no| table(&cleaner, no, "a", "z", 10)).collect();
        let merging = |l0: &[Arc<crate::version::TableFile>]| {
            let mut cs = Compacting::new(4);
            cs.tables.extend(l0.iter().map(|f| f.no()).chain([10]));
            (cs.l0, cs.running) = (true, 1);
            cs
        };
        assert_eq!(picked(&opts, &v, &mut merging(&v.levels[0])), None);
        // Flushes land: once enough are free, they are merged among themselves.
        let held = merging(&v.levels[0]);
        for no in 40..46 {
            v.levels[0].insert(0, table(&cleaner, no, "a", "z", 10));
        }
        let mut cs = held;
        assert_eq!(picked(&opts, &v, &mut cs), Some((0, 0, (40..46).rev().collect())));
        assert!(cs.intra_l0);
        // With a third compaction thread, the second one may take level 2; the third is kept.
        let three = Options { compaction_threads: 3, ..tiny_levels() };
        v.levels[0] = (1..=12).rev().map(|no| table(&cleaner, no, "a", "z", 10)).collect();
        let mut cs = merging(&v.levels[0]);
        assert_eq!(picked(&three, &v, &mut cs), Some((2, 3, vec![20, 30])));
        assert_eq!(picked(&three, &v, &mut cs), None);
        // While an intra-level-0 merge runs beside the merge into the base level, nothing is
        // kept: only one intra-level-0 merge runs at a time.
        let mut cs = merging(&v.levels[0]);
        (cs.intra_l0, cs.running) = (true, 2);
        assert_eq!(picked(&three, &v, &mut cs), Some((2, 3, vec![20, 30])));
        // Level 0 weighs its bytes too: ten tables of 80 MiB weigh 13 64-MiB memtables.
        let big = Options { max_bytes_for_level_base: 100 << 30, ..tiny_levels() };
        let mut w = Version::empty(4);
        w.levels[3] = vec![table(&cleaner, 30, "a", "z", 1_000 << 30)];
        w.levels[2] = vec![table(&cleaner, 20, "a", "h", 150 << 30), table(&cleaner, 21, "i", "z", 150 << 30)];
        w.levels[1] = vec![table(&cleaner, 10, "a", "z", 5 << 30)];
        w.levels[0] = (1..=10).rev().map(|no| table(&cleaner, no, "a", "z", 80 << 20)).collect();
        assert_eq!(picked(&big, &w, &mut merging(&w.levels[0])), None);
        w.levels[0].truncate(8);
        assert_eq!(picked(&big, &w, &mut merging(&w.levels[0])), Some((2, 3, vec![20, 30])));
        // Eleven level-0 tables being merged down: level 2 may take the other thread.
        v.levels[0] = (1..=11).rev().map(|no| table(&cleaner, no, "a", "z", 10)).collect();
        assert_eq!(picked(&opts, &v, &mut merging(&v.levels[0])), Some((2, 3, vec![20, 30])));
    }

    #[test]
    fn many_level_0_tables_over_a_larger_base_level_are_merged_among_themselves_first() {
        let (cleaner, opts) = (cleaner(), tiny_levels());
        let mut v = Version::empty(4);
        v.levels[3] = vec![table(&cleaner, 30, "a", "z", 100_000)];
        v.levels[1] = vec![table(&cleaner, 10, "a", "h", 500), table(&cleaner, 11, "i", "z", 500)];
        // Twelve tables (halfway from the compaction trigger, 4, to the slowdown trigger, 20)
        // of 120 bytes in all over a base level of 1,000: merged into one level-0 table.
        v.levels[0] = (1..=12).rev().map(|no| table(&cleaner, no, "a", "z", 10)).collect();
        let mut cs = Compacting::new(4);
        assert_eq!(picked(&opts, &v, &mut cs), Some((0, 0, (1..=12).rev().collect())));
        assert!(cs.intra_l0 && !cs.l0);
        // Eleven: into the base level.
        v.levels[0].remove(0);
        let want: Vec<u64> = (1..=11).rev().chain([10, 11]).collect();
        assert_eq!(picked(&opts, &v, &mut Compacting::new(4)), Some((0, 1, want)));
        // Twelve again, over a base level holding fewer bytes: into the base level.
        v.levels[0].insert(0, table(&cleaner, 12, "a", "z", 10));
        v.levels[1] = vec![table(&cleaner, 10, "a", "h", 50), table(&cleaner, 11, "i", "z", 50)];
        let want: Vec<u64> = (1..=12).rev().chain([10, 11]).collect();
        assert_eq!(picked(&opts, &v, &mut Compacting::new(4)), Some((0, 1, want)));
        // Twelve over the larger base level, but their bytes alone weigh twelve memtables'
        // worth (100 bytes each): merged among themselves they would weigh as much, so they
        // go down whole. A memtable's worth less, and they are merged among themselves.
        let opts = Options { memtable_size: 100, ..opts };
        v.levels[1] = vec![table(&cleaner, 10, "a", "h", 1_000), table(&cleaner, 11, "i", "z", 1_000)];
        v.levels[0] = (1..=12).rev().map(|no| table(&cleaner, no, "a", "z", 100)).collect();
        let want: Vec<u64> = (1..=12).rev().chain([10, 11]).collect();
        assert_eq!(picked(&opts, &v, &mut Compacting::new(4)), Some((0, 1, want)));
        v.levels[0] = (1..=12).rev().map(|no| table(&cleaner, no, "a", "z", 90)).collect();
        assert_eq!(v.l0_weight(opts.memtable_size), 12, "twelve tables, 11 memtables' worth");
        assert_eq!(picked(&opts, &v, &mut Compacting::new(4)), Some((0, 0, (1..=12).rev().collect())));
    }

    #[test]
    fn an_urgent_level_0_goes_into_the_empty_level_above_the_one_it_would_rewrite() {
        let (cleaner, opts) = (cleaner(), tiny_levels());
        let mut v = Version::empty(4);
        // A bottom level of 1,000 puts the base level at 2 (target 100), with level 1 empty.
        v.levels[3] = vec![table(&cleaner, 30, "a", "z", 1_000)];
        v.levels[2] = vec![table(&cleaner, 20, "a", "h", 250), table(&cleaner, 21, "i", "z", 250)];
        assert_eq!(LevelTargets::new(&opts, &v).base, 2);
        // Twelve level-0 tables (the urgent weight) of 120 bytes over 500 in the base level:
        // into level 1, alone, even with a base-level table held by a running compaction.
        v.levels[0] = (1..=12).rev().map(|no| table(&cleaner, no, "a", "z", 10)).collect();
        let l0: Vec<u64> = (1..=12).rev().collect();
        assert_eq!(picked(&opts, &v, &mut Compacting::new(4)), Some((0, 1, l0.clone())));
        let mut cs = Compacting::new(4);
        cs.tables.insert(21);
        cs.running = 1;
        let c = pick(&opts, &v, &mut cs).unwrap();
        assert!(!c.bottommost && c.next.is_empty() && cs.l0 && cs.l0_merge.is_some());
        assert_eq!((c.level, c.output_level), (0, 1));
        // Not urgent (eleven tables): into the base level, with the tables it overlaps.
        v.levels[0].remove(0);
        let want: Vec<u64> = (1..=11).rev().chain([20, 21]).collect();
        assert_eq!(picked(&opts, &v, &mut Compacting::new(4)), Some((0, 2, want)));
        // Urgent, over tables holding less than half level 0's bytes: into the base level.
        v.levels[0] = (1..=12).rev().map(|no| table(&cleaner, no, "a", "z", 90)).collect();
        let want: Vec<u64> = (1..=12).rev().chain([20, 21]).collect();
        assert_eq!(picked(&opts, &v, &mut Compacting::new(4)), Some((0, 2, want)));
        // Half of them exactly: into level 1.
        v.levels[2] = vec![table(&cleaner, 20, "a", "h", 300), table(&cleaner, 21, "i", "z", 240)];
        assert_eq!(LevelTargets::new(&opts, &v).base, 2);
        assert_eq!(picked(&opts, &v, &mut Compacting::new(4)), Some((0, 1, l0.clone())));
        // Level 1 holds data: level 0 goes into it (no level above is free).
        v.levels[1] = vec![table(&cleaner, 15, "c", "d", 100)];
        let want: Vec<u64> = (1..=12).rev().chain([15]).collect();
        assert_eq!(picked(&opts, &v, &mut Compacting::new(4)), Some((0, 1, want)));
        // Level 0 over the last level (the base level of a small database) merges into it.
        let mut w = Version::empty(4);
        w.levels[3] = vec![table(&cleaner, 30, "a", "z", 90)];
        w.levels[0] = (1..=12).rev().map(|no| table(&cleaner, no, "a", "z", 10)).collect();
        assert_eq!(LevelTargets::new(&opts, &w).base, 3);
        let want: Vec<u64> = (1..=12).rev().chain([30]).collect();
        assert_eq!(picked(&opts, &w, &mut Compacting::new(4)), Some((0, 3, want)));
    }

    #[test]
    fn level_0_weighs_its_bytes_in_memtables_when_they_outweigh_its_tables() {
        let cleaner = cleaner();
        let opts = Options {
            num_levels: 3,
            memtable_size: 100,
            dynamic_level_bytes: false,
            level0_compaction_trigger: 4,
            ..Options::default()
        };
        let mut v = Version::empty(3);
        v.levels[2] = vec![table(&cleaner, 20, "a", "z", 10_000)];
        v.levels[0] = vec![table(&cleaner, 1, "a", "z", 100), table(&cleaner, 2, "a", "z", 150)];
        assert_eq!(v.l0_weight(opts.memtable_size), 3, "250 bytes: 3 memtables' worth");
        assert_eq!(picked(&opts, &v, &mut Compacting::new(3)), None, "below the trigger");
        // One table as big as the seven flushes an intra-level-0 merge made of it: one table,
        // but seven memtables' worth of bytes to merge down, over the trigger.
        v.levels[0] = vec![table(&cleaner, 3, "a", "z", 601)];
        assert_eq!(v.l0_weight(opts.memtable_size), 7);
        assert_eq!(picked(&opts, &v, &mut Compacting::new(3)), Some((0, 1, vec![3])));
        // Many small tables weigh their count.
        v.levels[0] = (4..10).map(|no| table(&cleaner, no, "a", "z", 1)).collect();
        assert_eq!(v.l0_weight(opts.memtable_size), 6);
        assert_eq!(crate::version::l0_weight([], 100), 0);
        assert_eq!(v.l0_weight(0), 6, "a zero memtable size does not divide by zero");
    }

    #[test]
    fn a_level_compacts_the_table_with_the_least_overlap_below() {
        let cleaner = cleaner();
        let mut v = Version::empty(3);
        v.levels[1] = vec![
            table(&cleaner, 1, "a", "c", 100), // over 10 + 300 bytes below: 3.1 per byte
            table(&cleaner, 2, "d", "f", 100), // over 20: 0.2 per byte
            table(&cleaner, 3, "g", "i", 10),  // over 20: 2 per byte
            table(&cleaner, 4, "j", "k", 50),  // nothing below: moves down
        ];
        v.levels[2] = vec![
            table(&cleaner, 10, "a", "a", 10),
            table(&cleaner, 11, "b", "c", 300),
            table(&cleaner, 12, "e", "h", 20),
        ];
        let pick_in = |v: &Version, busy: &[u64], after: &str| {
            let busy: HashSet<u64> = busy.iter().copied().collect();
            least_overlap(v, 1, &busy, after.as_bytes())
                .map(|(f, next)| (f.no(), next.iter().map(|t| t.no()).collect::<Vec<_>>()))
        };
        let pick = |busy: &[u64], after: &str| pick_in(&v, busy, after);
        assert_eq!(pick(&[], ""), Some((4, vec![])));
        assert_eq!(pick(&[4], ""), Some((2, vec![12])));
        // Table 3 shares table 12 below with table 2: busy together.
        assert_eq!(pick(&[4, 12], ""), Some((1, vec![10, 11])));
        assert_eq!(pick(&[4, 2], ""), Some((3, vec![12])));
        assert_eq!(pick(&[1, 2, 3, 4], ""), None);
        // Equal ratios go round-robin after the last table compacted.
        v.levels[2].clear();
        assert_eq!(pick_in(&v, &[], ""), Some((1, vec![])));
        assert_eq!(pick_in(&v, &[], "c"), Some((2, vec![])));
        assert_eq!(pick_in(&v, &[], "k"), Some((1, vec![])));
    }

    #[test]
    fn intra_l0_span_stops_where_a_table_would_cost_more_per_table_removed() {
        // Equal flushes: all of them, up to the byte limit.
        assert_eq!(intra_l0_span(&[10; 8], u64::MAX, true), 8);
        assert_eq!(intra_l0_span(&[10; 8], 45, true), 4);
        // Newer small flushes in front of a big table an earlier merge made: the big one
        // would be rewritten for little gain, so it is left alone...
        assert_eq!(intra_l0_span(&[10, 10, 10, 10, 10, 400], u64::MAX, true), 5);
        // ...unless level 0 is urgent: then only the byte limit counts.
        assert_eq!(intra_l0_span(&[10, 10, 10, 10, 10, 400], u64::MAX, false), 6);
        assert_eq!(intra_l0_span(&[10, 10, 10, 10, 10, 400], 100, false), 5);
        // Growing sizes are taken while the average per removed table does not rise.
        assert_eq!(intra_l0_span(&[10, 10, 10, 12, 100], u64::MAX, true), 4);
        assert_eq!(intra_l0_span(&[5], u64::MAX, true), 1);
        assert_eq!(intra_l0_span(&[], u64::MAX, true), 0);
    }
}
