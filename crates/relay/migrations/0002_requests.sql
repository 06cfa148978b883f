-- Send requests with a caller-given id: a retry (same bundle, sender and id) is answered from
-- the first one instead of delivering twice; `fingerprint` tells a retry from a different
-- request that reuses the id.
CREATE TABLE requests (
    bundle TEXT NOT NULL,
    sender TEXT NOT NULL,
    request_id TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (bundle, sender, request_id)
);
