//! Web UI sessions and single-use login links (`ui_tokens`). A browser never holds the
//! API key: it exchanges the key (or a login link minted with it) for a random session
//! token that expires, can be revoked, and is stored only as its SHA-256.

use traqlyte_identity::sha256_hex;

use crate::clock::store_now_us;
use crate::tenants::SELECT_TENANT_FOR_KEY;
use crate::tx::{with_pool, with_tx};
use crate::{ApiKey, Store, StoreError, StoreTx, TenantId};

/// A random UI token: `tls_` and 48 hex digits (192 random bits). Only its SHA-256 is
/// stored.
#[derive(Clone, PartialEq, Eq)]
pub struct UiToken(String);

/// What a [`UiToken`] grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UiTokenKind {
    /// A single-use login link, exchanged for a session on first use.
    Login,
    /// A browser session (the cookie).
    Session,
}

impl UiTokenKind {
    fn as_str(self) -> &'static str {
        match self {
            UiTokenKind::Login => "login",
            UiTokenKind::Session => "session",
        }
    }
}

impl UiToken {
    const PREFIX: &'static str = "tls_";
    const HEX_LEN: usize = 48;

    fn generate() -> UiToken {
        UiToken(format!(
            "{}{}",
            Self::PREFIX,
            crate::model::random_hex(Self::HEX_LEN / 2)
        ))
    }

    /// Accepts a token of the right shape; says nothing of whether it exists.
    pub fn parse(text: &str) -> Option<UiToken> {
        let hex = text.strip_prefix(Self::PREFIX)?;
        let ok = hex.len() == Self::HEX_LEN && hex.bytes().all(|b| b.is_ascii_hexdigit());
        ok.then(|| UiToken(text.to_string()))
    }

    /// The secret, for the cookie or the login link.
    pub fn expose(&self) -> &str {
        &self.0
    }

    fn hash(&self) -> String {
        sha256_hex(self.0.as_bytes())
    }
}

impl std::fmt::Debug for UiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UiToken(…)")
    }
}

/// The working API key a UI token is exchanged for. A token names its key (by the key's
/// hash) and is honoured only while that key works: revoking the key ends the sessions
/// and login links it opened, at once and in every process, since each page reads the
/// key's state with the session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UiGrant {
    tenant: TenantId,
    key_hash: String,
}

impl UiGrant {
    /// The key's tenant.
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }
}

/// The tenant a live UI token stands for, with its name for pages to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UiTenant {
    /// The tenant.
    pub id: TenantId,
    /// Its name (`tenant create NAME`).
    pub name: String,
}

/// The tenant (id and name) of a live token of a kind (`$2`), its key not revoked; live on
/// the store's clock.
macro_rules! token_tenant {
    ($backend:ident) => {
        concat!(
            "SELECT t.tenant_id, n.name FROM ui_tokens t
             JOIN api_keys k ON k.key_hash = t.key_hash AND k.tenant_id = t.tenant_id
             JOIN tenants n ON n.tenant_id = t.tenant_id
             WHERE t.token_hash = $1 AND t.kind = $2 AND k.revoked_at_us IS NULL
               AND t.expires_at_us > ",
            store_now_us!($backend)
        )
    };
}

/// A live login token deleted as it is read; live on the store's clock.
macro_rules! consume_login {
    ($backend:ident) => {
        concat!(
            "DELETE FROM ui_tokens WHERE token_hash = $1 AND kind = 'login' AND expires_at_us > ",
            store_now_us!($backend),
            " RETURNING tenant_id, key_hash"
        )
    };
}

const PG_TOKEN_TENANT: &str = token_tenant!(postgres);
const SQLITE_TOKEN_TENANT: &str = token_tenant!(sqlite);
const PG_CONSUME_LOGIN: &str = consume_login!(postgres);
const SQLITE_CONSUME_LOGIN: &str = consume_login!(sqlite);

impl Store {
    /// The grant of a working (not revoked) API key.
    pub async fn ui_grant(&self, key: &ApiKey) -> Result<Option<UiGrant>, StoreError> {
        Ok(self.tenant_for_key(key).await?.map(|tenant| UiGrant {
            tenant,
            key_hash: key.hash(),
        }))
    }

    /// Mints a token of `kind` for a grant, valid for `lifetime_us` from now on the store's
    /// clock; returns it and its expiry. Expired tokens of every tenant are purged first,
    /// so the table stays bounded by the live ones. Expiry is judged on the store's clock
    /// alone: a link minted by one server and opened through another lives its whole
    /// lifetime, whatever their clocks say.
    pub async fn create_ui_token(
        &self,
        grant: &UiGrant,
        kind: UiTokenKind,
        lifetime_us: i64,
    ) -> Result<(UiToken, i64), StoreError> {
        let token = UiToken::generate();
        let now_us = self.clock_us().await?;
        let expires_at_us = now_us.saturating_add(lifetime_us);
        let mut tx = self.begin().await?;
        with_tx!(tx, |conn| sqlx::query(
            "DELETE FROM ui_tokens WHERE expires_at_us <= $1"
        )
        .bind(now_us)
        .execute(&mut *conn)
        .await
        .map(|_| ())?);
        tx.insert_ui_token(&token, grant, kind, now_us, expires_at_us)
            .await?;
        tx.commit().await?;
        Ok((token, expires_at_us))
    }

    /// The tenant of a live token of `kind` whose API key still works: a session's, for
    /// every page; a login link's, read without using it up, to tell a browser already
    /// logged in whose tenant the link would put it in.
    pub async fn ui_token_tenant(
        &self,
        token: &UiToken,
        kind: UiTokenKind,
    ) -> Result<Option<UiTenant>, StoreError> {
        let sql = self.by_backend(PG_TOKEN_TENANT, SQLITE_TOKEN_TENANT);
        with_pool!(self, reader, |pool| {
            let row: Option<(String, String)> = sqlx::query_as(sql)
                .bind(token.hash())
                .bind(kind.as_str())
                .fetch_optional(pool)
                .await?;
            Ok(row.map(|(id, name)| UiTenant {
                id: TenantId::from_stored(id),
                name,
            }))
        })
    }

    /// Exchanges a live login token for a session of `session_lifetime_us`, in one
    /// transaction: the login token is deleted in the statement that reads it (two
    /// concurrent uses cannot both succeed), and the session is stored in the same
    /// commit, so a failure in between leaves the link usable instead of spent. `None`
    /// when the token is unknown, expired, already used, or minted with a key revoked
    /// since (the token is then consumed all the same).
    pub async fn exchange_ui_login_token(
        &self,
        token: &UiToken,
        session_lifetime_us: i64,
    ) -> Result<Option<(UiGrant, UiToken)>, StoreError> {
        let consume = self.by_backend(PG_CONSUME_LOGIN, SQLITE_CONSUME_LOGIN);
        let now_us = self.clock_us().await?;
        let session = UiToken::generate();
        let mut tx = self.begin().await?;
        let row: Option<(String, String)> = with_tx!(tx, |conn| sqlx::query_as(consume)
            .bind(token.hash())
            .fetch_optional(&mut *conn)
            .await?);
        let Some((tenant, key_hash)) = row else {
            return Ok(None);
        };
        // Still a working key of the token's tenant.
        let works: Option<String> = with_tx!(tx, |conn| sqlx::query_scalar(SELECT_TENANT_FOR_KEY)
            .bind(&key_hash)
            .fetch_optional(&mut *conn)
            .await?);
        if works.as_deref() != Some(tenant.as_str()) {
            tx.commit().await?;
            return Ok(None);
        }
        let grant = UiGrant {
            tenant: TenantId::from_stored(tenant),
            key_hash,
        };
        let expires_at_us = now_us.saturating_add(session_lifetime_us);
        tx.insert_ui_token(
            &session,
            &grant,
            UiTokenKind::Session,
            now_us,
            expires_at_us,
        )
        .await?;
        tx.commit().await?;
        Ok(Some((grant, session)))
    }

    /// Revokes a token (logout). Unknown tokens are ignored.
    pub async fn delete_ui_token(&self, token: &UiToken) -> Result<(), StoreError> {
        with_pool!(self, writer, |pool| {
            sqlx::query("DELETE FROM ui_tokens WHERE token_hash = $1")
                .bind(token.hash())
                .execute(pool)
                .await?;
        });
        Ok(())
    }
}

impl StoreTx {
    /// Stores `token` of `kind` for `grant`, created at `now_us` and live until
    /// `expires_at_us`.
    async fn insert_ui_token(
        &mut self,
        token: &UiToken,
        grant: &UiGrant,
        kind: UiTokenKind,
        now_us: i64,
        expires_at_us: i64,
    ) -> Result<(), StoreError> {
        with_tx!(self, |conn| {
            sqlx::query(
            "INSERT INTO ui_tokens (token_hash, tenant_id, kind, created_at_us, expires_at_us, key_hash)
             VALUES ($1, $2, $3, $4, $5, $6)"
        )
        .bind(token.hash())
        .bind(grant.tenant.as_str())
        .bind(kind.as_str())
        .bind(now_us)
        .bind(expires_at_us)
        .bind(&grant.key_hash)
        .execute(&mut *conn)
        .await
        .map(|_| ())?
        });
        Ok(())
    }
}
