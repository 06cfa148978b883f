//! `session/set_mode`: session modes are the permission modes.

use super::*;

pub(crate) async fn set_mode(
    hub: &Hub,
    cx: &v1::ConnectionTo<Client>,
    req: SetSessionModeRequest,
) -> Result<SetSessionModeResponse, Error> {
    let open = hub.session(&req.session_id.to_string())?;
    let mode_id = req.mode_id.to_string();
    let mode = mode_of(&mode_id).ok_or_else(|| {
        Error::new(
            ErrorCode::INVALID_PARAMS,
            format!("no mode {mode_id:?}: read-only, workspace-write or full-access"),
        )
    })?;
    let update = UpdateSessionRequest {
        permission_mode: Some(mode),
        ..UpdateSessionRequest::default()
    };
    hub.api
        .update_session(open.id, &update)
        .await
        .map_err(|e| api_error("changing the mode", &e))?;
    config::tell(hub, cx, open.id, Some(mode)).await?;
    Ok(SetSessionModeResponse::new())
}
