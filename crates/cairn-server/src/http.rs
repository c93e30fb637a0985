//! HTTP/REST (filled in below).

use std::sync::Arc;

use tokio::net::TcpListener;

use crate::Shared;

pub(crate) async fn serve(l: TcpListener, shared: Arc<Shared>) {
    let _ = (l, shared);
}
