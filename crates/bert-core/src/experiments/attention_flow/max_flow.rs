//! The maximum flow through a network of real capacities, by Dinic's algorithm: breadth-first
//! levels from the source, then blocking flows along strictly increasing levels, until the sink
//! is out of reach. Attention flow asks for one per pair of positions, on the same network, so
//! the network is built once and its flows are reset between pairs.

use std::collections::VecDeque;

/// A directed network: each edge stored with its reverse (capacity 0), as the residual graph
/// needs.
pub struct Network {
    /// Per node, the indices of its edges (and of the reverses of the edges into it).
    out: Vec<Vec<usize>>,
    to: Vec<usize>,
    capacity: Vec<f64>,
    flow: Vec<f64>,
}

/// Flow below this is rounding: an augmenting path that carries no more is not one, and an edge
/// with no more room left is full. An absolute bound, right for these capacities, which are
/// probabilities (at most 1, so one unit in the last place is at most 2.2e-16).
const NEGLIGIBLE: f64 = 1e-15;

impl Network {
    pub fn new(nodes: usize) -> Network {
        Network { out: vec![Vec::new(); nodes], to: Vec::new(), capacity: Vec::new(), flow: Vec::new() }
    }

    /// An edge `from` → `to` that can carry `capacity`.
    pub fn add_edge(&mut self, from: usize, to: usize, capacity: f64) {
        for (a, b, c) in [(from, to, capacity), (to, from, 0.0)] {
            self.out[a].push(self.to.len());
            self.to.push(b);
            self.capacity.push(c);
            self.flow.push(0.0);
        }
    }

    /// The value of a maximum flow from `source` to `sink`; the flows of an earlier call are
    /// forgotten first.
    pub fn max_flow(&mut self, source: usize, sink: usize) -> f64 {
        self.flow.iter_mut().for_each(|f| *f = 0.0);
        if source == sink {
            return 0.0;
        }
        let mut total = 0.0;
        let mut level = vec![usize::MAX; self.out.len()];
        let mut next_edge = vec![0usize; self.out.len()];
        while self.levels(source, sink, &mut level) {
            next_edge.iter_mut().for_each(|e| *e = 0);
            loop {
                let pushed = self.push(source, sink, f64::INFINITY, &level, &mut next_edge);
                if pushed <= NEGLIGIBLE {
                    break;
                }
                total += pushed;
            }
        }
        total
    }

    fn residual(&self, edge: usize) -> f64 {
        self.capacity[edge] - self.flow[edge]
    }

    /// Each node's distance from `source` through edges with room left; whether `sink` is reached.
    fn levels(&self, source: usize, sink: usize, level: &mut [usize]) -> bool {
        level.iter_mut().for_each(|l| *l = usize::MAX);
        level[source] = 0;
        let mut queue = VecDeque::from([source]);
        while let Some(node) = queue.pop_front() {
            for &edge in &self.out[node] {
                let next = self.to[edge];
                if level[next] == usize::MAX && self.residual(edge) > NEGLIGIBLE {
                    level[next] = level[node] + 1;
                    queue.push_back(next);
                }
            }
        }
        level[sink] != usize::MAX
    }

    /// One augmenting path from `node` to `sink` along increasing levels, carrying at most
    /// `limit`: the flow it carried (0 when there is none from here).
    fn push(&mut self, node: usize, sink: usize, limit: f64, level: &[usize], next_edge: &mut [usize]) -> f64 {
        if node == sink {
            return limit;
        }
        while next_edge[node] < self.out[node].len() {
            let edge = self.out[node][next_edge[node]];
            let next = self.to[edge];
            let room = self.residual(edge);
            if level[next] == level[node] + 1 && room > NEGLIGIBLE {
                let pushed = self.push(next, sink, limit.min(room), level, next_edge);
                if pushed > NEGLIGIBLE {
                    self.flow[edge] += pushed;
                    self.flow[edge ^ 1] -= pushed;
                    return pushed;
                }
            }
            next_edge[node] += 1;
        }
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_textbook_network_has_its_known_maximum_flow() {
        // CLRS's figure 26.1: source 0, sink 5, maximum flow 23.
        let mut network = Network::new(6);
        for (a, b, c) in [
            (0, 1, 16.0),
            (0, 2, 13.0),
            (1, 3, 12.0),
            (2, 1, 4.0),
            (2, 4, 14.0),
            (3, 2, 9.0),
            (3, 5, 20.0),
            (4, 3, 7.0),
            (4, 5, 4.0),
        ] {
            network.add_edge(a, b, c);
        }
        assert_eq!(network.max_flow(0, 5), 23.0);
        assert_eq!(network.max_flow(0, 5), 23.0, "a second call starts from no flow");
        assert_eq!(network.max_flow(5, 0), 0.0, "no edge leaves the sink");
    }
}
