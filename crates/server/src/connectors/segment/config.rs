//! The limits of the Segment-compatible API, as Segment documents them.

/// Largest request body of `/v1/batch` (and of any `/v1/*` call), in bytes: Segment's
/// documented 500 KB a batch request.
pub(crate) const BATCH_BYTES_MAX: usize = 500 * 1024;

/// Largest message, in bytes of its JSON: Segment's documented 32 KB a call.
pub(crate) const MESSAGE_BYTES_MAX: usize = traqlyte_identity::segment::MESSAGE_BYTES_MAX;

/// Rejections answered by `GET /sources/{id}/rejections`, newest first.
pub(crate) const REJECTIONS_LISTED_MAX: u32 = 100;

/// Errors of single messages named in the answer to a batch whose every message was
/// rejected (the rest are counted).
pub(crate) const BATCH_ERRORS_LISTED_MAX: usize = 20;

/// Nesting a Segment message may use beyond the server's JSON depth limit: the batch
/// object and its array.
pub(crate) const BATCH_DEPTH_EXTRA: usize = 2;
