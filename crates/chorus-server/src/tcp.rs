//! Socket options for real-time streams.

use tokio::net::TcpStream;

/// Sends every write at once. With Nagle's algorithm a small write waits for the peer's ACK of
/// the one before it, and Linux delays ACKs by up to 40 ms: half a frame period added to a PCM
/// frame written right behind another. A socket that refuses the option (one already closed)
/// still works, so the error is not worth failing the connection for.
pub(crate) fn real_time(tcp: &TcpStream) {
    let _ = tcp.set_nodelay(true);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepted_and_connecting_sockets_turn_nagle_off() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = TcpStream::connect(addr).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        assert!(!server.nodelay().unwrap(), "Nagle is on by default");
        real_time(&server);
        real_time(&client);
        assert!(server.nodelay().unwrap() && client.nodelay().unwrap());
    }
}
