"""Lightning with gpudecode: a LightningDataModule whose train and val loaders are
gpudecode Loaders, under any Lightning strategy (DDP included).

    python examples/lightning/train.py --data DATA --epochs 2
    python examples/lightning/train.py --data DATA --accelerator cpu --devices 2 --strategy ddp

DATA holds train/ and val/: ImageFolder trees (one folder per class) or shards (as
`gpudecode shard` writes them). What Lightning asks of a DataLoader, a Loader has:
`len()`, `sampler.set_epoch()` (Lightning calls it each epoch), `state_dict()` /
`load_state_dict()` (Lightning keeps it in its checkpoints and resumes mid-epoch from it).
Each rank's Loader reads its own share: the Loaders are made in `train_dataloader()`,
after Lightning has started torch.distributed, so they see the rank and world size.
"""
from __future__ import annotations

import argparse
import os

import lightning as L
import torch
import torch.nn.functional as F
import torchvision.transforms.v2 as T

import gpudecode

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


class ImageData(L.LightningDataModule):
    def __init__(self, data: str, batch_size: int, image_size: int, seed: int) -> None:
        super().__init__()
        self.data, self.batch_size, self.size, self.seed = data, batch_size, image_size, seed

    def _device(self) -> str:
        # decode and augment where the model trains: this rank's GPU, else the CPU
        return f"cuda:{self.trainer.local_rank}" if torch.cuda.is_available() else "cpu"

    def train_dataloader(self) -> gpudecode.Loader:
        train = T.Compose([T.RandomResizedCrop(self.size), T.RandomHorizontalFlip(),
                           T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)])
        return gpudecode.Loader(os.path.join(self.data, "train"), batch_size=self.batch_size, transform=train,
                                shuffle=True, seed=self.seed, device=self._device())

    def val_dataloader(self) -> gpudecode.Loader:
        val = T.Compose([T.Resize(self.size + self.size // 7), T.CenterCrop(self.size),
                         T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)])
        return gpudecode.Loader(os.path.join(self.data, "val"), batch_size=self.batch_size, transform=val,
                                device=self._device())


class SmallNet(L.LightningModule):
    def __init__(self, num_classes: int, lr: float) -> None:
        super().__init__()
        self.lr = lr
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, num_classes))

    def training_step(self, batch, batch_idx):
        images, labels = batch
        loss = F.cross_entropy(self.body(images), labels)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        images, labels = batch
        logits = self.body(images)
        self.log("val_loss", F.cross_entropy(logits, labels), sync_dist=True)
        self.log("val_acc", (logits.argmax(1) == labels).float().mean(), sync_dist=True)

    def on_train_epoch_end(self) -> None:
        # each rank's batch count this epoch: equal on every rank (DDP would hang otherwise)
        print(f"rank {self.global_rank} epoch {self.current_epoch}: {self.trainer.num_training_batches} batches",
              flush=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="a folder with train/ and val/ (ImageFolder trees or shards)")
    p.add_argument("--num-classes", type=int, default=None, help="default: the train tree's class folders")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--accelerator", default="auto")
    p.add_argument("--devices", default="auto")
    p.add_argument("--strategy", default="auto")
    p.add_argument("--out", default="lightning_logs", help="checkpoints and logs")
    a = p.parse_args()
    L.seed_everything(a.seed, verbose=False)
    classes = a.num_classes or len([d for d in os.scandir(os.path.join(a.data, "train")) if d.is_dir()])
    trainer = L.Trainer(max_epochs=a.epochs, accelerator=a.accelerator, devices=a.devices, strategy=a.strategy,
                        default_root_dir=a.out, enable_progress_bar=False, enable_model_summary=False,
                        log_every_n_steps=1)
    model = SmallNet(classes, a.lr)
    trainer.fit(model, datamodule=ImageData(a.data, a.batch_size, a.image_size, a.seed))
    if trainer.is_global_zero:
        m = trainer.callback_metrics
        print(f"done: val_acc {float(m['val_acc']):.3f} val_loss {float(m['val_loss']):.3f}; "
              f"checkpoint {trainer.checkpoint_callback.best_model_path}", flush=True)


if __name__ == "__main__":
    main()
