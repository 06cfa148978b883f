//! The platform kit's retry policy, against a real HTTP server that answers from a script.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use switchboard_gateway::ChannelError;
use switchboard_gateway::platform::{
    Answer, Call, Limits, OverCap, PlatformClient, RetryPolicy, Verdict,
};

/// A scripted answer: status and `Retry-After`.
type Scripted = (u16, Option<&'static str>);

/// Answers each POST with the next scripted answer, then 200.
#[derive(Clone, Default)]
struct Script {
    answers: Arc<Mutex<VecDeque<Scripted>>>,
    hits: Arc<Mutex<Vec<Instant>>>,
}

async fn server(script: Script) -> String {
    let app = Router::new().route(
        "/call",
        axum::routing::any(move || {
            let script = script.clone();
            async move {
                script.hits.lock().unwrap().push(Instant::now());
                let next = script.answers.lock().unwrap().pop_front();
                let (status, retry_after) = next.unwrap_or((200, None));
                let mut resp: Response =
                    (StatusCode::from_u16(status).unwrap(), "{}").into_response();
                if let Some(r) = retry_after {
                    resp.headers_mut()
                        .insert("retry-after", HeaderValue::from_static(r));
                }
                resp
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

fn client(base: &str, policy: RetryPolicy) -> PlatformClient {
    PlatformClient::new(
        "test",
        base,
        reqwest::Client::new(),
        vec!["s3cret-token".into()],
        policy,
        Limits::new(),
    )
}

/// The verdict every platform gives: 2xx done, 429 rate limited, 5xx transient.
fn read(answer: Answer) -> Verdict<u16> {
    let status = answer.status;
    if status.is_success() {
        Verdict::Done(status.as_u16())
    } else if status == StatusCode::TOO_MANY_REQUESTS {
        Verdict::RateLimited(answer.retry_after())
    } else if status.is_server_error() {
        Verdict::Transient(ChannelError::Unreachable {
            channel: "test".into(),
            reason: format!("HTTP {status}"),
        })
    } else {
        Verdict::Failed(ChannelError::Api {
            channel: "test".into(),
            method: "call".into(),
            code: status.as_u16(),
            description: String::new(),
        })
    }
}

async fn call(c: &PlatformClient) -> Result<u16, ChannelError> {
    let keys = ["bot".to_owned(), "chat:1".to_owned()];
    let call = Call {
        label: "call",
        keys: &keys,
        timeout: Duration::from_secs(5),
        policy: None,
    };
    c.call(call, |http, base| http.post(format!("{base}/call")), read)
        .await
}

fn policy() -> RetryPolicy {
    RetryPolicy {
        backoff: Duration::from_millis(100),
        ..RetryPolicy::default()
    }
}

#[tokio::test]
async fn server_errors_are_retried_with_a_doubling_back_off() {
    let script = Script::default();
    script
        .answers
        .lock()
        .unwrap()
        .extend([(503, None), (502, None)]);
    let base = server(script.clone()).await;
    assert_eq!(call(&client(&base, policy())).await.unwrap(), 200);
    let hits = script.hits.lock().unwrap().clone();
    assert_eq!(hits.len(), 3);
    assert!(hits[1] - hits[0] >= Duration::from_millis(100));
    assert!(
        hits[2] - hits[1] >= Duration::from_millis(200),
        "the wait doubles"
    );

    // more failures than retries: the last error
    script
        .answers
        .lock()
        .unwrap()
        .extend([(500, None), (500, None), (500, None)]);
    let err = call(&client(&base, policy())).await.unwrap_err();
    assert!(matches!(err, ChannelError::Unreachable { .. }), "{err:?}");
}

#[tokio::test]
async fn connection_errors_are_retried_and_never_show_a_secret() {
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let c = client(&format!("http://{addr}/s3cret-token"), policy());
    let t0 = Instant::now();
    let err = call(&c).await.unwrap_err();
    assert!(matches!(err, ChannelError::Unreachable { .. }), "{err:?}");
    assert!(
        t0.elapsed() >= Duration::from_millis(300),
        "two retries: 100 + 200 ms"
    );
    assert!(
        !format!("{err} {err:?}").contains("s3cret-token"),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_rate_limit_over_the_cap_fails_or_is_waited_out_as_the_policy_says() {
    let script = Script::default();
    let base = server(script.clone()).await;
    let capped = RetryPolicy {
        max_retry_after: Duration::from_secs(1),
        ..policy()
    };

    script.answers.lock().unwrap().push_back((429, Some("2")));
    let t0 = Instant::now();
    let err = call(&client(&base, capped)).await.unwrap_err();
    assert!(
        matches!(
            err,
            ChannelError::RateLimited {
                retry_after_secs: 2,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(t0.elapsed() < Duration::from_millis(900), "failed at once");

    script.answers.lock().unwrap().push_back((429, Some("2")));
    let waiting = RetryPolicy {
        over_cap: OverCap::Wait,
        ..capped
    };
    let t0 = Instant::now();
    assert_eq!(call(&client(&base, waiting)).await.unwrap(), 200);
    assert!(
        t0.elapsed() >= Duration::from_millis(1900),
        "{:?}",
        t0.elapsed()
    );

    // under the cap: waited out, up to max_retries times
    script
        .answers
        .lock()
        .unwrap()
        .extend([(429, Some("0.2")), (429, Some("0.2"))]);
    let once = RetryPolicy {
        max_retries: 1,
        ..policy()
    };
    let err = call(&client(&base, once)).await.unwrap_err();
    assert!(
        matches!(
            err,
            ChannelError::RateLimited {
                retry_after_secs: 1,
                ..
            }
        ),
        "{err:?}"
    );
    // a 4xx is the answer: not retried
    let before = script.hits.lock().unwrap().len();
    script.answers.lock().unwrap().push_back((400, None));
    let err = call(&client(&base, policy())).await.unwrap_err();
    assert!(
        matches!(err, ChannelError::Api { code: 400, .. }),
        "{err:?}"
    );
    assert_eq!(script.hits.lock().unwrap().len(), before + 1);
}

#[tokio::test]
async fn a_download_told_to_slow_down_waits_it_out_up_to_the_cap() {
    let script = Script::default();
    script
        .answers
        .lock()
        .unwrap()
        .extend([(429, Some("0.2")), (429, Some("0.2"))]);
    let base = server(script.clone()).await;
    let c = client(&base, policy());
    let started = Instant::now();
    let got = c
        .download("file", |http| http.get(format!("{base}/call")), 1024)
        .await
        .unwrap();
    assert_eq!(&got[..], b"{}");
    assert_eq!(script.hits.lock().unwrap().len(), 3);
    assert!(started.elapsed() >= Duration::from_millis(400));
    // A wait over the cap is not waited: the reason says so.
    script.answers.lock().unwrap().push_back((429, Some("600")));
    let e = c
        .download("file", |http| http.get(format!("{base}/call")), 1024)
        .await
        .unwrap_err();
    assert!(e.contains("rate limiting"), "{e}");
}
