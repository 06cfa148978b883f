//! Real mail servers for the email channel's tests, started privately in a temporary
//! directory on free loopback ports (Debian's packages, installed by scripts/test):
//!
//! - **Dovecot**: IMAP (IDLE), its submission service (SMTP with AUTH, what a mail client
//!   and the bot send through) and LMTP (delivery into the mailboxes);
//! - **OpenSMTPD**: the MTA the submission service relays to, delivering to Dovecot by LMTP.
//!
//! So a mail goes the way it does on a real mail host: submission (AUTH) → MTA → LMTP →
//! Maildir → IMAP. Users are `NAME@localhost` with password `NAME-password`. Stopped on drop.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::free_port;

pub struct MailServer {
    /// IMAP, plain or with STARTTLS.
    pub imap_port: u16,
    /// IMAP over TLS.
    pub imaps_port: u16,
    /// SMTP submission with AUTH, plain or with STARTTLS.
    pub submission_port: u16,
    /// The test CA's certificate (PEM) the servers' certificate (for `localhost`) is from.
    pub ca_file: std::path::PathBuf,
    dir: tempfile::TempDir,
    smtpd: std::process::Child,
}

impl MailServer {
    /// Starts both servers for `users` and waits until they answer.
    pub fn start(users: &[&str]) -> MailServer {
        assert!(
            Path::new("/usr/sbin/dovecot").exists() && Path::new("/usr/sbin/smtpd").exists(),
            "Dovecot or OpenSMTPD is missing: run scripts/test (it installs dovecot-imapd, dovecot-lmtpd, dovecot-submissiond and opensmtpd)"
        );
        // Both daemons start as root and drop privileges (Dovecot to its
        // users and `nobody`, OpenSMTPD to its own).
        assert_eq!(
            current_uid(),
            0,
            "the mail servers of tests/email.rs are started as root (as in CI)"
        );
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let mail = d.join("mail");
        std::fs::create_dir(&mail).unwrap();
        chown_nobody(&mail);
        let passwd: String = users
            .iter()
            .map(|u| format!("{u}@localhost:{{PLAIN}}{u}-password\n"))
            .collect();
        std::fs::write(d.join("passwd"), passwd).unwrap();
        let (imap_port, imaps_port, lmtp_port, submission_port, mta_port) = (
            free_port(),
            free_port(),
            free_port(),
            free_port(),
            free_port(),
        );
        make_certificates(d);
        let dd = d.display();
        std::fs::write(
            d.join("dovecot.conf"),
            format!(
                r#"base_dir = {dd}/run
state_dir = {dd}/state
log_path = {dd}/dovecot.log
protocols = imap lmtp submission
listen = 127.0.0.1
ssl = yes
ssl_cert = <{dd}/server.pem
ssl_key = <{dd}/server.key
disable_plaintext_auth = no
auth_mechanisms = plain login
mail_location = maildir:{dd}/mail/%u
first_valid_uid = 0
default_internal_user = dovecot
default_internal_group = dovecot
default_login_user = dovenull
hostname = localhost
passdb {{
  driver = passwd-file
  args = scheme=PLAIN {dd}/passwd
}}
userdb {{
  driver = static
  args = uid=nobody gid=nogroup home={dd}/mail/%u
}}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {imap_port}
  }}
  inet_listener imaps {{
    address = 127.0.0.1
    port = {imaps_port}
  }}
}}
service lmtp {{
  inet_listener lmtp {{
    address = 127.0.0.1
    port = {lmtp_port}
  }}
}}
service submission-login {{
  inet_listener submission {{
    address = 127.0.0.1
    port = {submission_port}
  }}
}}
submission_relay_host = 127.0.0.1
submission_relay_port = {mta_port}
submission_relay_trusted = yes
protocol lmtp {{
  postmaster_address = postmaster@localhost
}}
"#
            ),
        )
        .unwrap();
        std::fs::write(
            d.join("smtpd.conf"),
            format!(
                "table everyone {{ \"@\" = \"nobody\" }}\n\
                 listen on 127.0.0.1 port {mta_port}\n\
                 action \"deliver\" lmtp \"127.0.0.1:{lmtp_port}\" rcpt-to virtual <everyone>\n\
                 match from any for domain \"localhost\" action \"deliver\"\n"
            ),
        )
        .unwrap();
        let status = Command::new("/usr/sbin/dovecot")
            .arg("-c")
            .arg(d.join("dovecot.conf"))
            .status()
            .unwrap();
        assert!(status.success(), "dovecot did not start");
        // OpenSMTPD's queue is the machine's (/var/spool/smtpd): mail an earlier, killed run
        // left there would be delivered into this run's mailboxes.
        clear_queue();
        let log = std::fs::File::create(d.join("smtpd.log")).unwrap();
        let smtpd = Command::new("/usr/sbin/smtpd")
            .arg("-d")
            .arg("-f")
            .arg(d.join("smtpd.conf"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let server = MailServer {
            imap_port,
            imaps_port,
            submission_port,
            ca_file: d.join("ca.pem"),
            dir,
            smtpd,
        };
        for port in [imap_port, imaps_port, submission_port, mta_port, lmtp_port] {
            server.wait_port(port);
        }
        server
    }

    fn wait_port(&self, port: u16) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "port {port} did not open (OpenSMTPD runs once per machine: is another smtpd running?):\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Both servers' logs.
    pub fn log(&self) -> String {
        let read = |f: &str| std::fs::read_to_string(self.dir.path().join(f)).unwrap_or_default();
        format!(
            "--- dovecot ---\n{}\n--- smtpd ---\n{}",
            read("dovecot.log"),
            read("smtpd.log")
        )
    }
}

impl Drop for MailServer {
    fn drop(&mut self) {
        let _ = Command::new("/usr/sbin/smtpctl")
            .args(["remove", "all"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.smtpd.kill();
        let _ = self.smtpd.wait();
        let _ = Command::new("/usr/sbin/dovecot")
            .arg("-c")
            .arg(self.dir.path().join("dovecot.conf"))
            .arg("stop")
            .status();
    }
}

/// A test CA (`ca.pem`) and a certificate for `localhost` from it (`server.pem`,
/// `server.key`), made with the openssl command.
fn make_certificates(d: &Path) {
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(d)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    std::fs::write(
        d.join("server.ext"),
        "subjectAltName = DNS:localhost\nbasicConstraints = CA:FALSE\nkeyUsage = digitalSignature, keyEncipherment\nextendedKeyUsage = serverAuth\n",
    )
    .unwrap();
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=Switchboard test CA",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ]);
}

/// Empties OpenSMTPD's queue (no smtpd runs: its control socket would be taken): the mail
/// in `queue/BUCKET/`, and what `incoming`, `temporary` and `purge` hold.
fn clear_queue() {
    let spool = Path::new("/var/spool/smtpd");
    let children = |dir: &Path| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(dir)
            .map(|r| r.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    };
    let mut doomed: Vec<std::path::PathBuf> = children(&spool.join("queue"))
        .iter()
        .flat_map(|bucket| children(bucket))
        .collect();
    for sub in ["incoming", "temporary", "purge"] {
        doomed.extend(children(&spool.join(sub)));
    }
    for p in doomed {
        let _ = if p.is_dir() {
            std::fs::remove_dir_all(&p)
        } else {
            std::fs::remove_file(&p)
        };
    }
}

fn current_uid() -> u32 {
    // `id -u`: no libc call needed for one number.
    let out = Command::new("id").arg("-u").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

fn chown_nobody(path: &Path) {
    let status = Command::new("chown")
        .arg("nobody:nogroup")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}
