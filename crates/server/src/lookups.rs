//! What a server remembers of the store's answers, so a single write that joins a group
//! commit does no read of its own before the queue (issue 11: those reads, not the
//! commits, bounded single requests once they shared commits).
//!
//! Only two kinds of answer are remembered, and neither is trusted alone:
//! - **An API key's tenant.** A key never moves to another tenant, but it can be revoked
//!   in any process at any moment. A write whose tenant came from here carries its key
//!   into the batch, and the batch's own transaction reads which of its keys still work
//!   (one statement per batch, [`traqlyte_store::StoreTx::check_writes`]): a revoked key
//!   stores nothing and is a 401, exactly as the read per request answered before.
//! - **A contract version's definition, and which version is the latest.** A registered
//!   version never changes (nor is it deleted), so its definition is remembered as is.
//!   "The latest" changes when a version is registered, in any process: a write that
//!   resolved the latest version from here carries that version into the batch, whose
//!   transaction reads the latest version again; if a newer one exists, the write is not
//!   stored and the handler identifies the event again under the new version.
//! - **A campaign's latest published version.** A published version never changes, but
//!   a newer one can be published in any process: a first-time assignment proposed under
//!   the remembered version carries it into the batch, whose transaction reads the
//!   campaign's latest version again; if a newer one exists, nothing is written and the
//!   handler reads the unit and the campaign as without this memory.
//!
//! So the store stays the only judge: this memory only saves the reads whose answers the
//! batch's transaction re-checks anyway. It is used only with group commit on (without
//! it, each request keeps its own reads). Each map holds at most [`ENTRIES_MAX`] entries,
//! and the contracts at most [`CONTRACT_BYTES_MAX`] (a tenant may register
//! contracts of up to a request body each); a full map drops entries one at a time to
//! make room (a burst of new keys costs reads, never memory, and does not empty the map
//! for the entries in use).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use traqlyte_identity::Contract;
use traqlyte_store::{ApiKey, CampaignId, CampaignVersion, TenantId};

/// Most entries of each map.
pub(crate) const ENTRIES_MAX: usize = 10_000;

/// Most bytes of contracts remembered, by [`Contract::held_bytes`].
pub(crate) const CONTRACT_BYTES_MAX: usize = 64 << 20;

/// The per-process memory of keys and contracts (see the module documentation).
pub(crate) struct Lookups {
    keys: Memory<ApiKey, TenantId>,
    contracts: Memory<(TenantId, String, u32), Arc<Contract>>,
    latest: Memory<(TenantId, String), u32>,
    campaigns: Memory<(TenantId, CampaignId), CampaignVersion>,
}

impl Default for Lookups {
    fn default() -> Self {
        Lookups {
            keys: Memory::default(),
            contracts: Memory::weighed(CONTRACT_BYTES_MAX, contract_weight),
            latest: Memory::default(),
            campaigns: Memory::default(),
        }
    }
}

/// What a remembered contract weighs against [`CONTRACT_BYTES_MAX`].
fn contract_weight(contract: &Arc<Contract>) -> usize {
    contract.held_bytes()
}

impl Lookups {
    /// The tenant a key resolved to before, if this process has seen it work.
    pub(crate) fn tenant(&self, key: &ApiKey) -> Option<TenantId> {
        self.keys.get(key)
    }

    /// Remembers a key that the store just said works.
    pub(crate) fn remember_key(&self, key: &ApiKey, tenant: &TenantId) {
        self.keys.put(key.clone(), tenant.clone());
    }

    /// Forgets a key a batch found revoked.
    pub(crate) fn forget_key(&self, key: &ApiKey) {
        self.keys.remove(key);
    }

    /// A remembered contract: version `version`, or the latest this process knows of.
    pub(crate) fn contract(
        &self,
        tenant: &TenantId,
        name: &str,
        version: Option<u32>,
    ) -> Option<Arc<Contract>> {
        let version = match version {
            Some(version) => version,
            None => self.latest.get(&(tenant.clone(), name.to_string()))?,
        };
        self.contracts
            .get(&(tenant.clone(), name.to_string(), version))
    }

    /// Remembers a contract the store just answered; as the latest when it was asked for
    /// as such.
    pub(crate) fn remember_contract(
        &self,
        tenant: &TenantId,
        contract: &Arc<Contract>,
        latest: bool,
    ) {
        let name = contract.name().as_str().to_string();
        if latest {
            // Never backwards: a read of v1 that finishes after another request cached v2
            // would send every later request through a stale round (and, three in a
            // row, a 503).
            self.latest.put_newer(
                (tenant.clone(), name.clone()),
                contract.version(),
                |cached, new| new >= cached,
            );
        }
        self.contracts
            .put((tenant.clone(), name, contract.version()), contract.clone());
    }

    /// The latest published version of a campaign, as the store last answered it here.
    pub(crate) fn campaign(
        &self,
        tenant: &TenantId,
        campaign_id: &CampaignId,
    ) -> Option<CampaignVersion> {
        self.campaigns.get(&(tenant.clone(), campaign_id.clone()))
    }

    /// Remembers the latest published version the store just answered for a campaign.
    pub(crate) fn remember_campaign(&self, tenant: &TenantId, latest: &CampaignVersion) {
        // Never backwards, as for contracts.
        self.campaigns.put_newer(
            (tenant.clone(), latest.campaign_id.clone()),
            latest.clone(),
            |cached, new| new.version >= cached.version,
        );
    }

    /// Forgets a campaign's latest version (a batch found a newer one).
    pub(crate) fn forget_campaign(&self, tenant: &TenantId, campaign_id: &CampaignId) {
        self.campaigns
            .remove(&(tenant.clone(), campaign_id.clone()));
    }

    /// Forgets which version of a contract is the latest (a batch found a newer one).
    pub(crate) fn forget_latest(&self, tenant: &TenantId, name: &str) {
        self.latest.remove(&(tenant.clone(), name.to_string()));
    }
}

/// One bounded map behind a lock held only for a lookup or an insert: at most
/// [`ENTRIES_MAX`] entries and `bytes_max` of their weight.
struct Memory<K, V> {
    held: Mutex<Held<K, V>>,
    bytes_max: usize,
    weigh: fn(&V) -> usize,
}

struct Held<K, V> {
    entries: HashMap<K, (V, usize)>,
    bytes: usize,
}

impl<K, V> Default for Memory<K, V> {
    fn default() -> Self {
        Memory::weighed(usize::MAX, |_| 0)
    }
}

impl<K, V> Memory<K, V> {
    fn weighed(bytes_max: usize, weigh: fn(&V) -> usize) -> Self {
        Memory {
            held: Mutex::new(Held {
                entries: HashMap::new(),
                bytes: 0,
            }),
            bytes_max,
            weigh,
        }
    }
}

impl<K: Eq + Hash + Clone, V: Clone> Memory<K, V> {
    fn get(&self, key: &K) -> Option<V> {
        // A poisoned lock (a panic while holding it) is answered as a miss: the store is
        // read instead.
        self.held
            .lock()
            .ok()?
            .entries
            .get(key)
            .map(|(value, _)| value.clone())
    }

    fn put(&self, key: K, value: V) {
        self.put_newer(key, value, |_, _| true);
    }

    /// [`Memory::put`] unless the value remembered is newer (`newer(cached, new)` false).
    /// A value heavier than the whole budget is not remembered.
    fn put_newer(&self, key: K, value: V, newer: impl Fn(&V, &V) -> bool) {
        let weight = (self.weigh)(&value);
        if weight > self.bytes_max {
            return;
        }
        let Ok(mut held) = self.held.lock() else {
            return;
        };
        if let Some((cached, _)) = held.entries.get(&key) {
            if !newer(cached, &value) {
                return;
            }
        }
        held.remove(&key);
        // Room made by dropping entries, whichever the map yields first: no order is
        // kept, so a lookup stays one hash probe.
        while held.entries.len() >= ENTRIES_MAX || held.bytes + weight > self.bytes_max {
            let Some(victim) = held.entries.keys().next().cloned() else {
                break;
            };
            held.remove(&victim);
        }
        held.bytes += weight;
        held.entries.insert(key, (value, weight));
    }

    fn remove(&self, key: &K) {
        if let Ok(mut held) = self.held.lock() {
            held.remove(key);
        }
    }
}

impl<K: Eq + Hash, V> Held<K, V> {
    fn remove(&mut self, key: &K) {
        if let Some((_, weight)) = self.entries.remove(key) {
            self.bytes -= weight;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Memory, ENTRIES_MAX};

    /// A full map makes room for a new entry by dropping one, not by emptying itself
    /// (which sent every request of a working set larger than the map to the store).
    #[test]
    fn a_full_map_drops_one_entry_for_the_next() {
        let memory: Memory<usize, usize> = Memory::default();
        for i in 0..ENTRIES_MAX {
            memory.put(i, i);
        }
        memory.put(ENTRIES_MAX, 1);
        assert_eq!(memory.get(&ENTRIES_MAX), Some(1));
        let kept = (0..ENTRIES_MAX).filter(|i| memory.get(i).is_some()).count();
        assert_eq!(kept, ENTRIES_MAX - 1);
        memory.remove(&ENTRIES_MAX);
        assert_eq!(memory.get(&ENTRIES_MAX), None);
    }

    /// Weighed entries stay within their byte budget however many there are: one tenant
    /// registering contracts of a request body each cannot make every process hold
    /// gigabytes; one heavier than the budget is not remembered at all.
    #[test]
    fn weighed_entries_stay_within_their_bytes() {
        let memory: Memory<usize, Vec<u8>> = Memory::weighed(1_000, Vec::len);
        for i in 0..100 {
            memory.put(i, vec![0; 300]);
        }
        let kept: Vec<usize> = (0..100).filter(|i| memory.get(i).is_some()).collect();
        assert_eq!(kept.len(), 3, "{kept:?}");
        assert!(kept.contains(&99));
        let held = memory.held.lock().expect("lock");
        assert_eq!(held.bytes, 900);
        drop(held);
        memory.put(100, vec![0; 1_001]);
        assert_eq!(memory.get(&100), None);
        // Replacing an entry counts its new weight only.
        memory.put(99, vec![0; 100]);
        assert_eq!(memory.held.lock().expect("lock").bytes, 700);
    }

    /// A contract is weighed by what it holds, not by its text: a pointer of a hundred
    /// thousand `/` is a hundred thousand tokens, each a `String`, and makes the contract
    /// too heavy to remember although its definition is 100 KB. (Registration refuses such
    /// a pointer now; one stored before is read as stored.)
    #[test]
    fn a_contract_of_many_tokens_is_too_heavy_to_remember() {
        use std::sync::Arc;
        use traqlyte_identity::Contract;
        let contract = |pointer: String| {
            Arc::new(
                Contract::from_stored_json(&serde_json::json!({
                    "name": "c", "version": 1, "fields": [{"pointer": pointer}]}))
                .expect("a contract"),
            )
        };
        let memory = Memory::weighed(super::CONTRACT_BYTES_MAX, super::contract_weight);
        memory.put(1, contract("/order_id".to_string()));
        let heavy = contract("/".repeat(2_000_000));
        assert!(heavy.canonical_definition().len() < super::CONTRACT_BYTES_MAX / 16);
        memory.put(2, heavy);
        assert!(memory.get(&1).is_some());
        assert!(memory.get(&2).is_none(), "too heavy to remember");
    }

    /// A latest version remembered late (its read started before a newer one was
    /// cached) does not replace the newer one; once forgotten, any is taken.
    #[test]
    fn a_latest_version_never_goes_backwards() {
        let memory: Memory<&str, u32> = Memory::default();
        let newer = |cached: &u32, new: &u32| new >= cached;
        memory.put_newer("c", 2, newer);
        memory.put_newer("c", 1, newer);
        assert_eq!(memory.get(&"c"), Some(2));
        memory.put_newer("c", 3, newer);
        assert_eq!(memory.get(&"c"), Some(3));
        memory.remove(&"c");
        memory.put_newer("c", 1, newer);
        assert_eq!(memory.get(&"c"), Some(1));
    }
}
