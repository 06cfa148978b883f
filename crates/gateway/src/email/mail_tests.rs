use super::*;

fn cfg() -> EmailConfig {
    let mut c = EmailConfig::new("bot@example.org", "mail.example.org", "pw");
    c.allowed_senders = vec!["ann@example.org".into(), "@team.example".into()];
    c
}

fn raw(headers: &str, body: &str) -> Vec<u8> {
    format!("{headers}\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{body}")
        .replace("\r\n", "\n")
        .replace('\n', "\r\n")
        .into_bytes()
}

#[test]
fn a_mail_from_an_allowed_sender_is_read_with_its_thread() {
    let mail = raw(
        "From: Ann Lee <Ann@Example.org>\nTo: bot@example.org\nSubject: Re: the migration\nMessage-ID: <m2@example.org>\nIn-Reply-To: <b1@example.org>\nReferences: <m1@example.org> <b1@example.org>",
        "allow\n\nOn Tue, 1 Dec 2026, Switchboard <bot@example.org> wrote:\n> Run `rm -rf build`?\n> Reply allow or deny.\n",
    );
    let r = read(&cfg(), &mail, "fallback").unwrap();
    assert_eq!(r.from, "ann@example.org");
    assert_eq!(r.name, "Ann Lee");
    assert_eq!(r.message_id, "m2@example.org");
    assert_eq!(r.in_reply_to.as_deref(), Some("b1@example.org"));
    assert_eq!(r.references, ["m1@example.org", "b1@example.org"]);
    assert_eq!(r.subject, "Re: the migration");
    assert_eq!(r.text, "allow", "the quoted prompt is cut off");
}

#[test]
fn senders_are_allowed_by_address_or_domain_only() {
    let allowed = cfg().allowed_senders;
    assert!(sender_allowed(&allowed, "ann@example.org"));
    assert!(sender_allowed(&allowed, "bob@team.example"));
    assert!(!sender_allowed(&allowed, "bob@example.org"));
    assert!(!sender_allowed(&allowed, "ann@example.org.evil"));
    assert!(!sender_allowed(&allowed, "x@sub.team.example"));
    assert!(sender_allowed(&["example.org".into()], "bob@example.org"));
    let stranger = raw("From: mallory@evil.example\nMessage-ID: <x@evil>", "hi");
    assert_eq!(read(&cfg(), &stranger, "f"), Err(Refusal::NotAllowed));
}

#[test]
fn robots_and_the_bot_itself_are_never_answered() {
    let c = cfg();
    for headers in [
        "From: bot@example.org",
        "From: MAILER-DAEMON@team.example",
        "From: ann@example.org\nAuto-Submitted: auto-replied",
        "From: ann@example.org\nPrecedence: bulk",
        "From: ann@example.org\nList-Id: <team.example.org>",
        "From: ann@example.org\nX-Autoreply: yes",
        "From: ann@example.org\nReturn-Path: <>",
    ] {
        assert_eq!(
            read(&c, &raw(headers, "x"), "f"),
            Err(Refusal::Automatic),
            "{headers}"
        );
    }
    let human = raw("From: ann@example.org\nAuto-Submitted: no", "x");
    assert!(read(&c, &human, "f").is_ok());
}

#[test]
fn only_the_trusted_server_s_topmost_verdict_counts() {
    let mx = "mx.example.org";
    let d = "example.org";
    assert!(
        authenticated(mx, &[], d, false).is_ok(),
        "nothing said: taken"
    );
    assert!(
        authenticated(mx, &[], d, true).is_err(),
        "nothing passed: refused when required"
    );
    let pass = "mx.example.org; dkim=pass header.d=example.org; spf=pass smtp.mailfrom=example.org; dmarc=pass";
    assert!(authenticated(mx, &[pass], d, true).is_ok());
    for fail in [
        "mx.example.org; dkim=fail (bad signature) header.d=example.org",
        "MX.example.org 1; spf=fail smtp.mailfrom=example.org",
        "mx.example.org;\r\n dmarc=fail header.from=example.org",
        "mx.example.org; dkim=pass; dmarc=permerror",
    ] {
        let e = authenticated(mx, &[fail], d, false).unwrap_err();
        assert!(e.contains("mx.example.org"), "{e}");
    }
    // Anyone can write a header naming another server: it is not read.
    let forged = "evil.example; dkim=pass; dmarc=pass";
    assert!(authenticated(mx, &[forged], d, false).is_ok());
    assert!(authenticated(mx, &[forged], d, true).is_err());
    assert!(authenticated(mx, &["evil.example; dkim=fail"], d, false).is_ok());
    // Only the topmost header of the trusted server: one the sender put below it is not.
    let real = "mx.example.org; spf=none; dkim=none";
    let planted = "mx.example.org; dmarc=pass";
    assert!(authenticated(mx, &[real, planted], d, true).is_err());
    assert!(authenticated(mx, &[planted, real], d, true).is_ok());
    // A pass must vouch for the From: domain: SPF of the attacker's own envelope domain, or
    // a DKIM signature of another domain, does not.
    for other in [
        "mx.example.org; spf=pass smtp.mailfrom=attacker@evil.example",
        "mx.example.org; dkim=pass (good) header.d=evil.example",
    ] {
        assert!(authenticated(mx, &[other], d, true).is_err(), "{other}");
        assert!(authenticated(mx, &[other], d, false).is_ok(), "{other}");
    }
    for aligned in [
        "mx.example.org; spf=pass smtp.mailfrom=bounces@mail.example.org",
        "mx.example.org; dkim=pass header.d=example.org header.s=s1",
        "mx.example.org; dkim=pass header.i=@example.org",
    ] {
        assert!(authenticated(mx, &[aligned], d, true).is_ok(), "{aligned}");
    }
    let soft = "mx.example.org; spf=softfail smtp.mailfrom=example.org; dmarc=pass";
    assert!(authenticated(mx, &[soft], d, false).is_ok());
    assert!(
        authenticated(mx, &[soft], d, true).is_err(),
        "softfail refused when required"
    );

    let mut c = cfg();
    c.trusted_authserv_id = Some(mx.into());
    let mail = raw(
        "Authentication-Results: mx.example.org; dmarc=fail header.from=example.org\nFrom: ann@example.org",
        "hi",
    );
    assert!(matches!(
        read(&c, &mail, "f"),
        Err(Refusal::Unauthenticated(_))
    ));
}

#[test]
fn quotes_attributions_and_signatures_are_cut_off() {
    assert_eq!(
        new_text("deny, not on main\n\n> the prompt\n"),
        "deny, not on main"
    );
    assert_eq!(
        new_text(
            "Looks good.\n\nOn Mon, Dec 7, 2026 at 9:00 AM Switchboard\n<bot@example.org> wrote:\n> quoted"
        ),
        "Looks good."
    );
    assert_eq!(new_text("Thanks\n-- \nAnn\nACME"), "Thanks");
    assert_eq!(
        new_text("ok\n\n-----Original Message-----\nFrom: bot\nsubject"),
        "ok"
    );
    assert_eq!(
        new_text("line one\n> quoted\nline two"),
        "line one\nline two"
    );
}

#[test]
fn a_thread_keeps_its_root_and_latest_references() {
    let mut t = Thread::default();
    for i in 0..20 {
        t.push(&format!("m{i}"));
        t.push(&format!("m{i}"));
    }
    assert_eq!(t.references.len(), 11);
    assert_eq!(t.references[0], "m0");
    assert_eq!(t.references.last().map(String::as_str), Some("m19"));
    assert_eq!(reply_subject("the migration"), "Re: the migration");
    assert_eq!(reply_subject("RE: the migration"), "RE: the migration");
    assert_eq!(reply_subject(""), "Re: your message");
    assert_eq!(
        reply_subject("Привет"),
        "Re: Привет",
        "not cut inside a character"
    );
    assert_eq!(reply_subject("éé"), "Re: éé");
}

#[test]
fn a_reply_is_threaded_with_text_and_html_parts_and_marked_automatic() {
    let thread = Thread {
        subject: "the migration".into(),
        references: vec!["m1@example.org".into(), "m2@example.org".into()],
    };
    let file = OutFile {
        name: "plan.txt",
        mime: "text/plain",
        bytes: b"step 1\n",
    };
    let msg = reply(
        &cfg(),
        "ann@example.org",
        &thread,
        "r1@example.org",
        "**Done**: <script>x</script>",
        Some(file),
    )
    .unwrap();
    let out = String::from_utf8(msg.formatted()).unwrap();
    for needle in [
        "Subject: Re: the migration",
        "Message-ID: <r1@example.org>",
        "In-Reply-To: <m2@example.org>",
        "References: <m1@example.org> <m2@example.org>",
        "Auto-Submitted: auto-replied",
        "multipart/alternative",
        "text/html",
        "<strong>Done</strong>",
        "&lt;script&gt;",
        "filename=\"plan.txt\"",
    ] {
        assert!(out.contains(needle), "{needle} missing in:\n{out}");
    }
    // What a mail client reads back.
    let parsed = MessageParser::default().parse(out.as_bytes()).unwrap();
    assert_eq!(
        parsed.body_text(0).unwrap().trim(),
        "**Done**: <script>x</script>"
    );
    assert!(
        out.contains("c3RlcCAxCg=="),
        "base64 of the exact bytes:\n{out}"
    );
    assert_eq!(attachment(out.as_bytes(), 0).unwrap(), b"step 1\n");
}
