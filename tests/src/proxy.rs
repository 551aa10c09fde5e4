//! A TCP proxy the test can cut and restore: a broker (or database) that "goes away" for the processes behind
//! it while the real service keeps running for the test itself. Not a mock: bytes go to the real service.

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A running proxy on `127.0.0.1:port` to `upstream`.
pub struct TcpProxy {
    /// The port clients connect to.
    pub port: u16,
    open: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl TcpProxy {
    /// Starts an open proxy to `upstream`.
    pub async fn start(upstream: SocketAddr) -> TcpProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let (open, state) = watch::channel(true);
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                if !*state.borrow() {
                    drop(client); // refused while cut: the client sees the connection close at once
                    continue;
                }
                let mut state = state.clone();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let mut client = client;
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = state.wait_for(|open| !*open) => {} // cut: drop both ends
                    }
                });
            }
        });
        TcpProxy { port, open, task }
    }

    /// Cuts every connection and refuses new ones (`false`), or accepts again (`true`).
    pub fn set_open(&self, open: bool) {
        self.open.send_replace(open);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
