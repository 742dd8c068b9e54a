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
//! it, each request keeps its own reads). Each map holds at most [`ENTRIES_MAX`] entries
//! and is emptied when full (a burst of new keys costs reads, never memory).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use traqlyte_identity::Contract;
use traqlyte_store::{ApiKey, CampaignId, CampaignVersion, TenantId};

/// Most entries of each map.
pub(crate) const ENTRIES_MAX: usize = 10_000;

/// The per-process memory of keys and contracts (see the module documentation).
#[derive(Default)]
pub(crate) struct Lookups {
    keys: Memory<ApiKey, TenantId>,
    contracts: Memory<(TenantId, String, u32), Arc<Contract>>,
    latest: Memory<(TenantId, String), u32>,
    campaigns: Memory<(TenantId, CampaignId), CampaignVersion>,
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

/// One bounded map behind a lock held only for a lookup or an insert.
struct Memory<K, V> {
    map: Mutex<HashMap<K, V>>,
}

impl<K, V> Default for Memory<K, V> {
    fn default() -> Self {
        Memory {
            map: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash, V: Clone> Memory<K, V> {
    fn get(&self, key: &K) -> Option<V> {
        // A poisoned lock (a panic while holding it) is answered as a miss: the store is
        // read instead.
        self.map.lock().ok()?.get(key).cloned()
    }

    fn put(&self, key: K, value: V) {
        self.put_newer(key, value, |_, _| true);
    }

    /// [`Memory::put`] unless the value remembered is newer (`newer(cached, new)` false).
    fn put_newer(&self, key: K, value: V, newer: impl Fn(&V, &V) -> bool) {
        if let Ok(mut map) = self.map.lock() {
            if map.get(&key).is_some_and(|cached| !newer(cached, &value)) {
                return;
            }
            if map.len() >= ENTRIES_MAX {
                map.clear();
            }
            map.insert(key, value);
        }
    }

    fn remove(&self, key: &K) {
        if let Ok(mut map) = self.map.lock() {
            map.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Memory, ENTRIES_MAX};

    #[test]
    fn a_full_map_is_emptied_before_the_next_insert() {
        let memory: Memory<usize, usize> = Memory::default();
        for i in 0..ENTRIES_MAX {
            memory.put(i, i);
        }
        assert_eq!(memory.get(&7), Some(7));
        memory.put(ENTRIES_MAX, 1);
        assert_eq!(memory.get(&7), None);
        assert_eq!(memory.get(&ENTRIES_MAX), Some(1));
        memory.remove(&ENTRIES_MAX);
        assert_eq!(memory.get(&ENTRIES_MAX), None);
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
