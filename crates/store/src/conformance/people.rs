//! Users, tokens, links, console sign-ins and the audit log.

use serde_json::json;
use uuid::Uuid;

use super::{check, ts};
use crate::people::{
    AuditFilter, ConsoleSessionRecord, LinkRecord, NewAudit, TokenRecord, UserRecord,
};
use crate::{Store, StoreError};

fn user(name: &str, role: &str) -> UserRecord {
    UserRecord {
        name: name.into(),
        role: role.into(),
        password_hash: None,
        created_at: ts(1),
        updated_at: ts(1),
    }
}

fn token(user: &str, hash: &str) -> TokenRecord {
    TokenRecord {
        id: Uuid::now_v7(),
        user_name: user.into(),
        name: "ci".into(),
        token_hash: hash.into(),
        scopes: vec!["sessions:read".into(), "sessions:write".into()],
        created_at: ts(2),
        expires_at: Some(ts(50)),
        last_used_at: None,
        revoked_at: None,
    }
}

/// A name no other check uses.
fn fresh(prefix: &str) -> String {
    format!("{prefix}-{}", Uuid::now_v7().simple())
}

pub async fn users_round_trip(store: &dyn Store) {
    let name = fresh("ann");
    let u = user(&name, "member");
    check("create_user", store.create_user(&u).await);
    assert!(
        matches!(store.create_user(&u).await, Err(StoreError::Conflict(_))),
        "a second user of one name is a conflict"
    );
    assert_eq!(
        check("get_user", store.get_user(&name).await),
        Some(u.clone())
    );
    assert!(check("list_users", store.list_users().await).contains(&u));
    assert!(check(
        "update_user",
        store
            .update_user(&name, Some("operator"), Some(Some("$argon2id$x")), &ts(3))
            .await
    ));
    let Some(got) = check("get_user", store.get_user(&name).await) else {
        panic!("the user is there")
    };
    assert_eq!(got.role, "operator");
    assert_eq!(got.password_hash.as_deref(), Some("$argon2id$x"));
    assert_eq!(got.updated_at, ts(3));
    // Only what is given changes; `Some(None)` clears the password.
    assert!(check(
        "update_user",
        store.update_user(&name, None, Some(None), &ts(4)).await
    ));
    let Some(got) = check("get_user", store.get_user(&name).await) else {
        panic!("the user is there")
    };
    assert_eq!((got.role.as_str(), got.password_hash), ("operator", None));
    assert!(!check(
        "update_user",
        store
            .update_user(&fresh("nobody"), Some("admin"), None, &ts(4))
            .await
    ));
    assert!(check("delete_user", store.delete_user(&name).await));
    assert!(!check("delete_user", store.delete_user(&name).await));
    assert_eq!(check("get_user", store.get_user(&name).await), None);
}

pub async fn tokens_round_trip_and_go_with_their_user(store: &dyn Store) {
    let name = fresh("bob");
    check(
        "create_user",
        store.create_user(&user(&name, "member")).await,
    );
    let hash = fresh("hash");
    let t = token(&name, &hash);
    check("create_token", store.create_token(&t).await);
    assert!(
        matches!(
            store
                .create_token(&token(&fresh("ghost"), &fresh("h")))
                .await,
            Err(StoreError::NotFound(_))
        ),
        "a token of no user is refused"
    );
    assert!(
        matches!(
            store.create_token(&token(&name, &hash)).await,
            Err(StoreError::Conflict(_))
        ),
        "two tokens of one hash are a conflict"
    );
    assert_eq!(
        check("token_by_hash", store.token_by_hash(&hash).await),
        Some(t.clone())
    );
    assert_eq!(
        check("get_token", store.get_token(t.id).await),
        Some(t.clone())
    );
    assert_eq!(
        check("token_by_hash", store.token_by_hash("nope").await),
        None
    );
    let second = token(&name, &fresh("hash"));
    check("create_token", store.create_token(&second).await);
    let mine = check("list_tokens", store.list_tokens(Some(&name)).await);
    assert_eq!(
        mine.iter().map(|t| t.id).collect::<Vec<_>>(),
        vec![t.id, second.id]
    );
    assert!(
        check("list_tokens", store.list_tokens(None).await).len() >= 2,
        "everyone's tokens include these"
    );
    check("touch_token", store.touch_token(t.id, &ts(7)).await);
    assert!(check(
        "revoke_token",
        store.revoke_token(t.id, &ts(8)).await
    ));
    // The first revocation's time stays.
    assert!(check(
        "revoke_token",
        store.revoke_token(t.id, &ts(9)).await
    ));
    let Some(got) = check("get_token", store.get_token(t.id).await) else {
        panic!("the token is there")
    };
    assert_eq!(got.last_used_at.as_deref(), Some(ts(7).as_str()));
    assert_eq!(got.revoked_at.as_deref(), Some(ts(8).as_str()));
    assert!(!check(
        "revoke_token",
        store.revoke_token(Uuid::now_v7(), &ts(9)).await
    ));
    check("delete_user", store.delete_user(&name).await);
    assert_eq!(check("get_token", store.get_token(second.id).await), None);
}

pub async fn links_and_console_sessions_go_with_their_user(store: &dyn Store) {
    let name = fresh("cy");
    check(
        "create_user",
        store.create_user(&user(&name, "viewer")).await,
    );
    let identity = fresh("U");
    let l = LinkRecord {
        platform: "slack".into(),
        identity: identity.clone(),
        user_name: name.clone(),
        created_at: ts(1),
    };
    check("link", store.link(&l).await);
    assert!(
        matches!(store.link(&l).await, Err(StoreError::Conflict(_))),
        "an identity acts as one user"
    );
    assert!(matches!(
        store
            .link(&LinkRecord {
                user_name: fresh("ghost"),
                identity: fresh("U"),
                ..l.clone()
            })
            .await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(
        check("linked_user", store.linked_user("slack", &identity).await),
        Some(name.clone())
    );
    assert_eq!(
        check(
            "linked_user",
            store.linked_user("telegram", &identity).await
        ),
        None
    );
    assert_eq!(
        check("list_links", store.list_links(Some(&name)).await),
        vec![l.clone()]
    );
    let s = ConsoleSessionRecord {
        id_hash: fresh("cs"),
        user_name: name.clone(),
        created_at: ts(1),
        expires_at: ts(59),
    };
    check(
        "create_console_session",
        store.create_console_session(&s).await,
    );
    let other = ConsoleSessionRecord {
        id_hash: fresh("cs"),
        ..s.clone()
    };
    check(
        "create_console_session",
        store.create_console_session(&other).await,
    );
    assert_eq!(
        check(
            "get_console_session",
            store.get_console_session(&s.id_hash).await
        ),
        Some(s.clone())
    );
    assert!(check(
        "delete_console_session",
        store.delete_console_session(&s.id_hash).await
    ));
    assert_eq!(
        check(
            "get_console_session",
            store.get_console_session(&s.id_hash).await
        ),
        None
    );
    assert_eq!(
        check(
            "delete_console_sessions_of",
            store.delete_console_sessions_of(&name).await
        ),
        1
    );
    check(
        "create_console_session",
        store.create_console_session(&s).await,
    );
    assert!(check("unlink", store.unlink("slack", &identity).await));
    assert!(!check("unlink", store.unlink("slack", &identity).await));
    check("link", store.link(&l).await);
    check("delete_user", store.delete_user(&name).await);
    assert_eq!(
        check("linked_user", store.linked_user("slack", &identity).await),
        None
    );
    assert_eq!(
        check(
            "get_console_session",
            store.get_console_session(&s.id_hash).await
        ),
        None
    );
}

pub async fn audit_appends_in_order_and_filters(store: &dyn Store) {
    let actor = fresh("dee");
    let mut ids = Vec::new();
    for (i, action) in ["token.create", "signin", "token.revoke"]
        .iter()
        .enumerate()
    {
        let id = check(
            "append_audit",
            store
                .append_audit(&NewAudit {
                    at: ts(10 + i as u32),
                    actor: actor.clone(),
                    action: (*action).into(),
                    target: (i == 0).then(|| "t1".to_string()),
                    via: "api".into(),
                    detail: json!({"n": i}),
                })
                .await,
        );
        ids.push(id);
    }
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids increase: {ids:?}");
    let all = check(
        "list_audit",
        store
            .list_audit(&AuditFilter {
                actor: Some(actor.clone()),
                limit: 10,
                ..AuditFilter::default()
            })
            .await,
    );
    assert_eq!(all.iter().map(|e| e.id).collect::<Vec<_>>(), ids);
    assert_eq!(all[0].target.as_deref(), Some("t1"));
    assert_eq!(all[0].detail, json!({"n": 0}));
    assert_eq!(all[1].target, None);
    let revokes = check(
        "list_audit",
        store
            .list_audit(&AuditFilter {
                actor: Some(actor.clone()),
                action: Some("token.revoke".into()),
                limit: 10,
                ..AuditFilter::default()
            })
            .await,
    );
    assert_eq!(revokes.len(), 1);
    let window = check(
        "list_audit",
        store
            .list_audit(&AuditFilter {
                actor: Some(actor.clone()),
                from: Some(ts(11)),
                to: Some(ts(12)),
                limit: 10,
                ..AuditFilter::default()
            })
            .await,
    );
    assert_eq!(
        window.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![ids[1]]
    );
    let page = check(
        "list_audit",
        store
            .list_audit(&AuditFilter {
                actor: Some(actor),
                after: Some(ids[0]),
                limit: 1,
                ..AuditFilter::default()
            })
            .await,
    );
    assert_eq!(page.iter().map(|e| e.id).collect::<Vec<_>>(), vec![ids[1]]);
}

pub async fn sessions_belong_to_owners_and_are_shared(store: &dyn Store) {
    let mine = fresh("own");
    let other = fresh("oth");
    let mut ids = Vec::new();
    for owner in [Some(mine.clone()), Some(other.clone()), None] {
        let s = crate::SessionRecord {
            owner,
            ..super::new_session_record(&fresh("t"))
        };
        check("create_session", store.create_session(&s).await);
        assert_eq!(
            check("get_session", store.get_session(s.id).await).map(|r| r.owner),
            Some(s.owner.clone())
        );
        ids.push(s.id);
    }
    let visible = |sessions: Vec<crate::SessionRecord>| -> Vec<uuid::Uuid> {
        let mut v: Vec<_> = sessions
            .into_iter()
            .map(|s| s.id)
            .filter(|id| ids.contains(id))
            .collect();
        v.sort();
        v
    };
    let (page, total) = check(
        "list",
        store.list_sessions(1000, 0, false, Some(&mine)).await,
    );
    assert_eq!((visible(page), total), (vec![ids[0]], 1));
    // Shared with them by name, then with everyone.
    assert!(check(
        "share",
        store
            .set_session_shares(ids[1], std::slice::from_ref(&mine))
            .await
    ));
    assert_eq!(
        check("shares", store.session_shares(ids[1]).await),
        vec![mine.clone()]
    );
    let (page, total) = check(
        "list",
        store.list_sessions(1000, 0, false, Some(&mine)).await,
    );
    assert_eq!((visible(page), total), (vec![ids[0], ids[1]], 2));
    assert!(check(
        "share",
        store.set_session_shares(ids[1], &["*".to_string()]).await
    ));
    assert_eq!(
        check("shares", store.session_shares(ids[1]).await),
        vec!["*".to_string()]
    );
    let (page, _) = check(
        "list",
        store.list_sessions(1000, 0, false, Some(&fresh("x"))).await,
    );
    assert_eq!(visible(page), vec![ids[1]]);
    // Replaced, not added to; none for a session that is not there.
    assert!(check("share", store.set_session_shares(ids[1], &[]).await));
    assert!(check("shares", store.session_shares(ids[1]).await).is_empty());
    assert!(!check(
        "share",
        store
            .set_session_shares(uuid::Uuid::now_v7(), std::slice::from_ref(&mine))
            .await
    ));
    // Everyone's, without a user.
    let (page, _) = check("list", store.list_sessions(1000, 0, false, None).await);
    assert_eq!(visible(page).len(), 3);
    // Shares go with their session.
    check(
        "share",
        store
            .set_session_shares(ids[2], std::slice::from_ref(&mine))
            .await,
    );
    check("delete", store.delete_session(ids[2]).await);
    assert!(check("shares", store.session_shares(ids[2]).await).is_empty());
}
