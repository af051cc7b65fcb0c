//! A bounded, sharded map from [`Key`] to a weighed, expiring value: the storage of every
//! table of state kept between calls (rate limiters, sessions, the dedupe table, verified
//! tokens, MCP session owners).
//!
//! Each entry has a weight (bytes, or 1 for a table bounded by count) and a deadline on
//! the caller's clock. The table holds at most its budget of weight; past that it drops
//! entries from the front of a queue. An entry joins the back when inserted, and again
//! when *touched* ([`Op::Touch`], which also moves its deadline): a table whose users
//! touch what they read is least-recently-used with a time-to-idle (rate limiters,
//! sessions); one whose users don't is oldest-first with a time-to-live — the right order
//! for duplicate suppression, where a join never extends a window, so the oldest flight
//! is the one nearest its end. Expired entries are dropped as they reach the front, and
//! treated as absent whenever they are looked up. Deadlines of one table can differ (per
//! contract windows, per quota refill times), so an expired entry may sit behind a live
//! one: before a shard over its share drops a live entry, it sweeps out every expired
//! one (at most once per [`SWEEP_EVERY`] of its clock, so a table full of live entries
//! doesn't pay a sweep per insert).
//!
//! Why not moka (used here before): on every call of an `idempotent: false` tool its
//! concurrent hash table, read/write logs and housekeeping cost ~4 µs for a claim and a
//! settle, ~11% of a loaded sidecar's CPU on the MCP benchmark (docs/bench-history.md, third round). Here an
//! operation is one short critical section on one of up to 16 shards; nothing runs in the
//! background, and the binary carries no cache crate's code.
//!
//! Invariants:
//! - Every operation on a key happens under its shard's lock, so a caller's closure sees
//!   and changes the entry atomically (of concurrent identical claims exactly one inserts).
//! - A shard's weight never exceeds its share of the budget after an operation returns.
//!   The bound is per shard, so a table filled with exactly its budget of uniform keys
//!   keeps a little less (100,000 sessions in a 100,000-session table: ~99.5% kept).
//! - An entry heavier than a whole shard's share is not kept (and drops nothing else);
//!   users size `min_share` so their largest entry fits.
//! - The queue holds each live entry once plus stale slots (for entries replaced or
//!   removed); it is compacted when it grows past twice the entries plus 32, so memory
//!   stays proportional to the entries held.
//! - Hashes are keyed with a random seed per table, so keys an agent can grind (digests
//!   of its own arguments) can't be aimed at one bucket or one shard.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::canonical::Key;

/// Shards at most; fewer when the budget is small, so each keeps a useful share.
const MAX_SHARDS: usize = 16;
/// The least share of a table bounded by count that a shard is given.
pub const MIN_SHARD_ENTRIES: u64 = 64;
/// How often (on the table's clock) an over-full shard may sweep out expired entries.
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// What to do with the entry under a key, decided under its shard's lock.
pub enum Op<V> {
    Keep,
    Put {
        value: V,
        weight: u32,
        expires_at: Duration,
    },
    /// The entry stays, weighed anew (its deadline and place in the queue stay too).
    Reweigh(u32),
    /// The entry stays, with a new deadline, and moves to the back of the queue.
    Touch(Duration),
    Remove,
}

pub struct Table<V> {
    shards: Box<[Mutex<Shard<V>>]>,
    /// Weight one shard may hold.
    budget: u64,
    seed: Seed,
}

struct Shard<V> {
    entries: HashMap<Key, Slot<V>, Seed>,
    /// Entries in insertion order, each tagged with the generation it was inserted as.
    queue: VecDeque<(Key, u64)>,
    generation: u64,
    weight: u64,
    /// When expired entries were last swept out.
    swept: Option<Duration>,
}

struct Slot<V> {
    value: V,
    weight: u32,
    expires_at: Duration,
    generation: u64,
}

impl<V> Table<V> {
    /// A table of at most `budget` weight, split into shards of at least `min_share`.
    pub fn new(budget: u64, min_share: u64) -> Table<V> {
        let wanted = usize::try_from(budget / min_share.max(1)).unwrap_or(MAX_SHARDS);
        let count = wanted.clamp(1, MAX_SHARDS);
        // A power of two, so a key's shard is a mask of its hash.
        let count = 1 << count.ilog2();
        let seed = Seed(rand::random(), rand::random());
        Table {
            shards: (0..count).map(|_| Mutex::new(Shard::new(seed))).collect(),
            budget: budget / count as u64,
            seed,
        }
    }

    /// Runs `decide` on the live entry under `key` (`None` when absent or expired at
    /// `now`) and applies the [`Op`] it returns, all under the shard's lock.
    pub fn compute<R>(
        &self,
        key: Key,
        now: Duration,
        decide: impl FnOnce(Option<&V>) -> (Op<V>, R),
    ) -> R {
        let mut shard = self.shard(&key);
        let live = shard.entries.get(&key).filter(|s| s.expires_at > now);
        let (op, result) = decide(live.map(|s| &s.value));
        let too_heavy = |weight: u32| u64::from(weight) > self.budget;
        match op {
            Op::Keep => {}
            // Kept, it would push out everything else in the shard and then itself.
            Op::Put { weight, .. } | Op::Reweigh(weight) if too_heavy(weight) => shard.remove(&key),
            Op::Put {
                value,
                weight,
                expires_at,
            } => shard.put(key, value, weight, expires_at),
            Op::Reweigh(weight) => shard.reweigh(&key, weight),
            Op::Touch(expires_at) => shard.touch(key, expires_at),
            Op::Remove => shard.remove(&key),
        }
        shard.trim(self.budget, now);
        result
    }

    /// Puts `value` under `key`, whatever was there.
    pub fn insert(&self, key: Key, now: Duration, value: V, weight: u32, expires_at: Duration) {
        let put = Op::Put {
            value,
            weight,
            expires_at,
        };
        self.compute(key, now, |_| (put, ()));
    }

    /// Drops the entry under `key`, if any.
    pub fn remove(&self, key: Key, now: Duration) {
        self.compute(key, now, |_| (Op::Remove, ()));
    }

    /// Entries held, expired ones not yet dropped included.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).entries.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The total weight of the entries held.
    pub fn weight(&self) -> u64 {
        self.shards.iter().map(|s| lock(s).weight).sum()
    }

    fn shard(&self, key: &Key) -> MutexGuard<'_, Shard<V>> {
        // Bits the map's own bucket choice (low bits) and tags (top 7) don't use.
        let bits = (self.seed.hash_one(key) >> 32) as usize;
        lock(&self.shards[bits & (self.shards.len() - 1)])
    }
}

/// A panic inside a critical section leaves a shard consistent (every change to it is a
/// few plain assignments after `decide` returns), so a poisoned lock is still usable.
fn lock<V>(shard: &Mutex<Shard<V>>) -> MutexGuard<'_, Shard<V>> {
    shard.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<V> Shard<V> {
    fn new(seed: Seed) -> Shard<V> {
        Shard {
            entries: HashMap::with_hasher(seed),
            queue: VecDeque::new(),
            generation: 0,
            weight: 0,
            swept: None,
        }
    }

    fn put(&mut self, key: Key, value: V, weight: u32, expires_at: Duration) {
        self.generation += 1;
        let slot = Slot {
            value,
            weight,
            expires_at,
            generation: self.generation,
        };
        if let Some(old) = self.entries.insert(key, slot) {
            self.weight -= u64::from(old.weight);
        }
        self.weight += u64::from(weight);
        self.queue.push_back((key, self.generation));
    }

    fn reweigh(&mut self, key: &Key, weight: u32) {
        if let Some(slot) = self.entries.get_mut(key) {
            let old = std::mem::replace(&mut slot.weight, weight);
            self.weight = self.weight - u64::from(old) + u64::from(weight);
        }
    }

    fn touch(&mut self, key: Key, expires_at: Duration) {
        if let Some(slot) = self.entries.get_mut(&key) {
            self.generation += 1;
            slot.generation = self.generation;
            slot.expires_at = expires_at;
            self.queue.push_back((key, self.generation));
        }
    }

    fn remove(&mut self, key: &Key) {
        if let Some(old) = self.entries.remove(key) {
            self.weight -= u64::from(old.weight);
        }
    }

    /// Drops entries from the front while the shard is over `budget` or the front has
    /// expired, then compacts the queue if stale slots dominate it.
    fn trim(&mut self, budget: u64, now: Duration) {
        // At most one sweep per trim, so the loop ends whatever the clock does.
        let mut may_sweep = true;
        while let Some(&(key, generation)) = self.queue.front() {
            let expired = self
                .entries
                .get(&key)
                .filter(|s| s.generation == generation)
                .map(|s| s.expires_at <= now);
            match expired {
                Some(false) if self.weight <= budget => break,
                // A live entry would go for the weight: first, any expired one goes.
                Some(false) if std::mem::take(&mut may_sweep) && self.sweep(now) => continue,
                Some(_) => self.remove(&key),
                None => {}
            }
            self.queue.pop_front();
        }
        self.compact();
    }

    /// Removes every expired entry, unless it was done within [`SWEEP_EVERY`]; whether
    /// it ran.
    fn sweep(&mut self, now: Duration) -> bool {
        if self.swept.is_some_and(|at| now < at + SWEEP_EVERY) {
            return false;
        }
        self.swept = Some(now);
        let mut freed = 0;
        self.entries.retain(|_, slot| {
            let keep = slot.expires_at > now;
            if !keep {
                freed += u64::from(slot.weight);
            }
            keep
        });
        self.weight -= freed;
        true
    }

    fn compact(&mut self) {
        if self.queue.len() > 2 * self.entries.len() + 32 {
            let entries = &self.entries;
            self.queue.retain(|(key, generation)| {
                entries
                    .get(key)
                    .is_some_and(|s| s.generation == *generation)
            });
        }
    }
}

/// A table's hash key. Keys are SHA-256 output, already uniform, so SipHash (the default)
/// is more than they need; but an agent can grind its arguments for digests that share
/// bits, so the hash is keyed: each 8-byte word is mixed in with a full 64×64→128-bit
/// multiply by seeded values and folded (the "folded multiply" of wyhash and foldhash),
/// and the result folded once more, which leaves no bit of it predictable without the
/// seed.
#[derive(Clone, Copy)]
struct Seed(u64, u64);

impl BuildHasher for Seed {
    type Hasher = KeyHasher;

    fn build_hasher(&self) -> KeyHasher {
        KeyHasher {
            seed: *self,
            state: self.0,
        }
    }
}

struct KeyHasher {
    seed: Seed,
    state: u64,
}

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            let product = u128::from(self.state ^ u64::from_le_bytes(word))
                * u128::from(self.seed.1 ^ 0x9e37_79b9_7f4a_7c15);
            self.state = (product as u64) ^ ((product >> 64) as u64);
        }
    }

    fn write_usize(&mut self, _: usize) {
        // The length prefix of a `[u8; 16]`: the same for every key, so it adds nothing.
    }

    fn finish(&self) -> u64 {
        // One more round: in the rounds above, a change in a word's high byte moves only
        // the high bits of the low half, so keys differing there alone shared shard bits
        // under ~3% of seeds. Folding once more carries every bit into every bit.
        let product = u128::from(self.state) * u128::from(self.seed.0 ^ 0x2d35_8dcc_aa6c_78a5);
        (product as u64) ^ ((product >> 64) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    fn key(n: u32) -> Key {
        let mut key = [0; 16];
        key[..4].copy_from_slice(&n.to_le_bytes());
        key[4..8].copy_from_slice(&n.wrapping_mul(2_654_435_761).to_le_bytes());
        key
    }

    fn put(table: &Table<u32>, n: u32, weight: u32, now: Duration, expires_at: Duration) {
        table.compute(key(n), now, |_| {
            (
                Op::Put {
                    value: n,
                    weight,
                    expires_at,
                },
                (),
            )
        });
    }

    fn get(table: &Table<u32>, n: u32, now: Duration) -> Option<u32> {
        table.compute(key(n), now, |v| (Op::Keep, v.copied()))
    }

    #[test]
    fn holds_at_most_its_bytes_dropping_the_oldest_first() {
        let table = Table::new(1000, 1000);
        for n in 0..100 {
            put(&table, n, 100, Duration::ZERO, HOUR);
        }
        assert_eq!((table.len(), table.weight()), (10, 1000));
        assert_eq!(get(&table, 89, Duration::ZERO), None);
        assert_eq!(get(&table, 90, Duration::ZERO), Some(90));
        // Reading an entry (without a touch) doesn't save it.
        put(&table, 100, 100, Duration::ZERO, HOUR);
        assert_eq!(get(&table, 90, Duration::ZERO), None);
    }

    #[test]
    fn expired_entries_are_absent_and_dropped() {
        let table = Table::new(1000, 1000);
        put(&table, 1, 10, Duration::ZERO, Duration::from_secs(5));
        put(&table, 2, 10, Duration::ZERO, HOUR);
        let later = Duration::from_secs(5);
        assert_eq!(table.len(), 2);
        assert_eq!(get(&table, 2, later), Some(2));
        assert_eq!(table.len(), 1, "the expired front entry was dropped");
        assert_eq!(get(&table, 1, later), None);
        assert_eq!(table.weight(), 10);
    }

    #[test]
    fn reweigh_and_remove_keep_the_accounts() {
        let table = Table::new(1000, 1000);
        put(&table, 1, 100, Duration::ZERO, HOUR);
        table.compute(key(1), Duration::ZERO, |_| (Op::Reweigh(700), ()));
        assert_eq!(table.weight(), 700);
        put(&table, 2, 400, Duration::ZERO, HOUR);
        assert_eq!(
            get(&table, 1, Duration::ZERO),
            None,
            "over budget: oldest went"
        );
        table.compute(key(2), Duration::ZERO, |_| (Op::Remove, ()));
        assert_eq!((table.len(), table.weight()), (0, 0));
    }

    #[test]
    fn stale_queue_slots_do_not_accumulate() {
        let table = Table::<u32>::new(1 << 20, 64 * 1024);
        let long = Duration::from_secs(1 << 30);
        put(&table, 0, 1, Duration::ZERO, long); // stays at the front, never expires
        for n in 1..10_000 {
            put(&table, n, 1, Duration::ZERO, HOUR);
            table.compute(key(n), Duration::ZERO, |_| (Op::Remove, ()));
        }
        let queued: usize = table.shards.iter().map(|s| lock(s).queue.len()).sum();
        assert!(queued < 100 * table.shards.len(), "{queued}");
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn touched_entries_live_on_and_go_last() {
        let table = Table::new(3, 3);
        let idle = Duration::from_secs(10);
        for n in 0..3 {
            put(&table, n, 1, Duration::ZERO, idle);
        }
        let later = Duration::from_secs(9);
        table.compute(key(0), later, |_| (Op::Touch(later + idle), ()));
        put(&table, 3, 1, later, later + idle);
        assert_eq!(
            get(&table, 1, later),
            None,
            "least recently used went first"
        );
        let much_later = Duration::from_secs(15);
        assert_eq!(get(&table, 0, much_later), Some(0), "touched: not idle");
        assert_eq!(get(&table, 2, much_later), None, "idle past its deadline");
    }

    #[test]
    fn an_entry_heavier_than_a_shard_is_not_kept_and_drops_nothing() {
        let table = Table::new(1000, 1000);
        put(&table, 1, 400, Duration::ZERO, HOUR);
        put(&table, 2, 1001, Duration::ZERO, HOUR);
        assert_eq!(get(&table, 2, Duration::ZERO), None);
        assert_eq!(get(&table, 1, Duration::ZERO), Some(1));
        assert_eq!(table.weight(), 400);
    }

    #[test]
    fn expired_entries_behind_a_live_one_go_before_it() {
        let table = Table::new(300, 300);
        put(&table, 1, 100, Duration::ZERO, HOUR); // long-lived, at the front
        put(&table, 2, 100, Duration::ZERO, Duration::from_secs(10));
        put(&table, 3, 100, Duration::ZERO, Duration::from_secs(10));
        let later = Duration::from_secs(20);
        put(&table, 4, 100, later, HOUR);
        assert_eq!(get(&table, 1, later), Some(1), "the dead weight went first");
        assert_eq!((table.len(), table.weight()), (2, 200));
    }

    #[test]
    fn a_full_shard_sweeps_at_most_once_a_period() {
        let table = Table::new(300, 300);
        let at = Duration::from_millis;
        for n in 0..3 {
            put(&table, n, 100, at(0), HOUR);
        }
        put(&table, 3, 100, at(0), HOUR); // full of live entries: sweeps, then 0 goes
        put(&table, 4, 100, at(0), at(200)); // no sweep again so soon: 1 goes
        assert_eq!(get(&table, 1, at(0)), None);
        // 4 has expired, but within the period a live entry still goes first...
        put(&table, 5, 100, at(500), HOUR);
        assert_eq!(get(&table, 2, at(500)), None);
        assert_eq!(table.weight(), 300, "4 still weighs");
        // ...and after it, the sweep runs and the dead weight goes instead.
        put(&table, 6, 100, at(1500), HOUR);
        assert_eq!(get(&table, 3, at(1500)), Some(3));
        assert_eq!((table.len(), table.weight()), (3, 300));
    }

    #[test]
    fn keys_spread_over_shards_and_seeds_differ() {
        let table = Table::<u32>::new(16 << 20, 64 * 1024);
        // Keys that agree in all but one byte still land in every shard.
        let mut used = [false; MAX_SHARDS];
        for n in 0..=255u8 {
            let mut key = [7; 16];
            key[15] = n;
            let bits = (table.seed.hash_one(key) >> 32) as usize;
            used[bits & (MAX_SHARDS - 1)] = true;
        }
        assert!(used.iter().all(|u| *u));
        let other = Table::<u32>::new(16 << 20, 64 * 1024);
        assert_ne!(
            table.seed.hash_one([0u8; 16]),
            other.seed.hash_one([0u8; 16])
        );
    }

    #[test]
    fn small_tables_use_one_shard() {
        assert_eq!(Table::<u32>::new(1000, 64 * 1024).shards.len(), 1);
        assert_eq!(
            Table::<u32>::new(16 << 20, 64 * 1024).shards.len(),
            MAX_SHARDS
        );
        assert_eq!(Table::<u32>::new(200 * 1024, 64 * 1024).shards.len(), 2);
    }
}
