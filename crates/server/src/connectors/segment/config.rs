//! The limits of the Segment-compatible API, as Segment documents them.

/// Largest request body of `/v1/batch` (and of any `/v1/*` call), in bytes: Segment's
/// documented 500 KB a batch request.
pub(crate) const BATCH_BYTES_MAX: usize = 500 * 1024;

/// Largest message, in bytes of its JSON: Segment's documented 32 KB a call.
pub(crate) const MESSAGE_BYTES_MAX: usize = traqlyte_identity::segment::MESSAGE_BYTES_MAX;

/// Rejections in one page of `GET /sources/{id}/rejections` when `limit` is not given
/// (the 100 newest it always answered), and at most (each holds a message of up to
/// 32 KB: 32 MB a page).
pub(crate) const REJECTIONS_PAGE_DEFAULT: u32 = 100;
pub(crate) const REJECTIONS_PAGE_MAX: u32 = 1_000;

/// Sources in one page of `GET /sources` when `limit` is not given, as it always listed.
pub(crate) const SOURCES_PAGE_DEFAULT: u32 = traqlyte_store::SOURCES_PAGE_MAX;

/// Errors of single messages named in the answer to a batch whose every message was
/// rejected (the rest are counted).
pub(crate) const BATCH_ERRORS_LISTED_MAX: usize = 20;

/// Nesting a Segment message may use beyond the server's JSON depth limit: the batch
/// object and its array.
pub(crate) const BATCH_DEPTH_EXTRA: usize = 2;
