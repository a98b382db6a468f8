//! A plain connection-level (L4) round-robin balancer, as a test puts one in front of several
//! `weft serve` processes: each client connection goes to the next backend in turn, a backend
//! that refuses the connection is skipped (the next one is tried), and bytes are copied both
//! ways until either side closes. It knows nothing of HTTP: a server-sent events stream passes
//! as it comes, and a backend killed mid-stream closes its client's connection, as a real
//! balancer does.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::net::{TcpListener, TcpStream};

/// A running balancer; it stops (and closes every connection it carries) when dropped.
#[derive(Debug)]
pub struct Balancer {
    /// The address clients connect to.
    pub addr: SocketAddr,
    /// Connections carried to each backend (in the order given).
    counts: Arc<Vec<AtomicUsize>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Balancer {
    /// Listens on a free port of 127.0.0.1 and spreads connections over `backends` (at least
    /// one) in turn.
    pub fn start(backends: Vec<SocketAddr>) -> Self {
        assert!(
            !backends.is_empty(),
            "a balancer needs at least one backend"
        );
        let std_listener =
            std::net::TcpListener::bind("127.0.0.1:0").expect("bind the balancer's port");
        std_listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let addr = std_listener.local_addr().expect("the balancer's address");
        let counts: Arc<Vec<AtomicUsize>> =
            Arc::new(backends.iter().map(|_| AtomicUsize::new(0)).collect());
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let carried = counts.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("the balancer's runtime");
            rt.block_on(async move {
                let listener = TcpListener::from_std(std_listener).expect("a tokio listener");
                tokio::select! {
                    () = accept(listener, Arc::new(backends), carried) => {}
                    _ = stopped => {}
                }
            });
            rt.shutdown_background();
        });
        Self {
            addr,
            counts,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT`, the URL a client is given.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// How many connections went to each backend so far, in the order the backends were given.
    pub fn carried(&self) -> Vec<usize> {
        self.counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect()
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn accept(
    listener: TcpListener,
    backends: Arc<Vec<SocketAddr>>,
    counts: Arc<Vec<AtomicUsize>>,
) {
    let next = Arc::new(AtomicUsize::new(0));
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let (backends, counts, next) = (backends.clone(), counts.clone(), next.clone());
        tokio::spawn(async move {
            let first = next.fetch_add(1, Ordering::Relaxed);
            // The next backend in turn; one that refuses is skipped.
            for k in 0..backends.len() {
                let i = (first + k) % backends.len();
                if let Ok(mut backend) = TcpStream::connect(backends[i]).await {
                    counts[i].fetch_add(1, Ordering::Relaxed);
                    let _ = backend.set_nodelay(true);
                    let mut client = client;
                    let _ = client.set_nodelay(true);
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut backend).await;
                    return;
                }
            }
            // No backend answers: the client's connection is closed.
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A backend that answers every connection with its name.
    fn named(name: &'static str) -> SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { continue };
                let _ = s.write_all(name.as_bytes());
            }
        });
        addr
    }

    fn ask(b: &Balancer) -> String {
        let mut s = std::net::TcpStream::connect(b.addr).expect("connect to the balancer");
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    #[test]
    fn connections_go_round_robin_and_a_refusing_backend_is_skipped() {
        // A port nothing listens on: bound, then let go.
        let dead = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr");
        let b = Balancer::start(vec![named("a"), dead, named("c")]);
        let got: Vec<String> = (0..6).map(|_| ask(&b)).collect();
        // In turn: a, (the dead one, skipped for) c, c; a, c, c.
        assert_eq!(got, ["a", "c", "c", "a", "c", "c"]);
        let carried = b.carried();
        assert_eq!(carried[1], 0, "{carried:?}");
        assert_eq!(carried[0] + carried[2], 6, "{carried:?}");
    }
}
