//! DANet's two attention modules, written as in the paper (matmul, softmax, matmul).

use tch::nn::{self, Module};
use tch::{Kind, Tensor};

/// Position attention: every position attends over all N = H*W positions.
#[derive(Debug)]
pub struct Pam {
    query_conv: nn::Conv2D,
    key_conv: nn::Conv2D,
    value_conv: nn::Conv2D,
    pub gamma: Tensor,
}

impl Pam {
    pub fn new(p: &nn::Path, channels: i64, qk_channels: i64) -> Self {
        let conv = |name: &str, out| nn::conv2d(p / name, channels, out, 1, Default::default());
        Self {
            query_conv: conv("query_conv", qk_channels),
            key_conv: conv("key_conv", qk_channels),
            value_conv: conv("value_conv", channels),
            gamma: p.zeros("gamma", &[1]),
        }
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        let (b, c, h, w) = x.size4().expect("PAM input is NCHW");
        let n = h * w;
        let query = self.query_conv.forward(x).view([b, -1, n]).permute([0, 2, 1]);
        let key = self.key_conv.forward(x).view([b, -1, n]);
        // No 1/sqrt(d): DANet's energies are raw dot products; keep them in fp32.
        let energy = query.bmm(&key);
        let attention = energy.softmax(-1, Kind::Float);
        let value = self.value_conv.forward(x).view([b, -1, n]);
        let out = value.bmm(&attention.permute([0, 2, 1])).view([b, c, h, w]);
        &self.gamma * out + x
    }
}

/// Channel attention: every channel attends over all C channels, no convolutions.
#[derive(Debug)]
pub struct Cam {
    pub gamma: Tensor,
}

impl Cam {
    pub fn new(p: &nn::Path) -> Self {
        Self { gamma: p.zeros("gamma", &[1]) }
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        let (b, c, h, w) = x.size4().expect("CAM input is NCHW");
        let query = x.view([b, c, -1]);
        let energy = query.bmm(&query.permute([0, 2, 1]));
        // DANet's max-minus form: softmax(rowmax(E) - E).
        let energy_new = energy.amax([-1].as_slice(), true).expand_as(&energy) - &energy;
        let attention = energy_new.softmax(-1, Kind::Float);
        let out = attention.bmm(&query).view([b, c, h, w]);
        &self.gamma * out + x
    }
}
