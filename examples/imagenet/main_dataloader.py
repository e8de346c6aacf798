"""ImageNet-style training, twice: main_dataloader.py reads ImageFolder trees with
torch.utils.data.DataLoader and torchvision transforms; main.py gives the same datasets
to gpudecode's Loader. `diff main_dataloader.py main.py` is the whole swap.

Follows the structure of pytorch/examples' imagenet/main.py: ImageFolder-style
arguments, -j/-b/--epochs/--resume/-e, DistributedDataParallel under torchrun, and
distributed validation whose remainder every rank evaluates.

    python main.py DATA -a resnet18 -b 256 --epochs 90
    torchrun --nproc_per_node 8 main.py DATA --dist-backend nccl

DATA holds train/ and val/, one subfolder per class; --dummy trains on torchvision's
FakeData instead (as pytorch/examples' --dummy: --dummy-size images, 224x224). main.py
gives the same datasets to gpudecode.Loader, which reads them as they lie (a folder of
shards made by `gpudecode shard` is read by giving its path: Loader(traindir,
transform=train_tf, ...)).
"""
import argparse
import os
import shutil
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.utils.data
import torchvision.datasets as datasets
import torchvision.models as models
import torchvision.transforms as transforms
import torchvision.transforms.v2 as transforms_v2
from torch.utils.data import DataLoader, Subset
from torch.utils.data.distributed import DistributedSampler

model_names = sorted(name for name in models.__dict__
                     if name.islower() and not name.startswith("__") and callable(models.__dict__[name]))

parser = argparse.ArgumentParser(description="ImageNet-style training")
parser.add_argument("data", metavar="DIR", help="path to the dataset (train/ and val/ inside)")
parser.add_argument("-a", "--arch", metavar="ARCH", default="resnet18", choices=model_names,
                    help="model architecture: " + " | ".join(model_names) + " (default: resnet18)")
parser.add_argument("-j", "--workers", default=4, type=int, metavar="N", help="data loading workers (default: 4)")
parser.add_argument("--epochs", default=90, type=int, metavar="N", help="number of total epochs to run")
parser.add_argument("--start-epoch", default=0, type=int, metavar="N", help="manual epoch number (on restarts)")
parser.add_argument("-b", "--batch-size", default=256, type=int, metavar="N", help="mini-batch size per process")
parser.add_argument("--lr", "--learning-rate", default=0.1, type=float, metavar="LR", help="initial learning rate")
parser.add_argument("--momentum", default=0.9, type=float, metavar="M", help="momentum")
parser.add_argument("--wd", "--weight-decay", default=1e-4, type=float, metavar="W", dest="weight_decay",
                    help="weight decay (default: 1e-4)")
parser.add_argument("-p", "--print-freq", default=10, type=int, metavar="N", help="print frequency (default: 10)")
parser.add_argument("--resume", default="", type=str, metavar="PATH", help="path to latest checkpoint")
parser.add_argument("-e", "--evaluate", dest="evaluate", action="store_true", help="evaluate model on validation set")
parser.add_argument("--image-size", default=224, type=int, help="training crop size (validation: 256/224 of it)")
parser.add_argument("--ten-crop", action="store_true",
                    help="validate on ten crops of each image (TenCrop), each image's outputs averaged")
parser.add_argument("--num-classes", default=1000, type=int, help="classes of the model's output")
parser.add_argument("--dist-backend", default="nccl", type=str, help="distributed backend (gloo on the CPU)")
parser.add_argument("--seed", default=None, type=int, help="seed for initializing training")
parser.add_argument("--checkpoint-dir", default=".", help="where checkpoints are written")
parser.add_argument("--dummy", action="store_true", help="use fake data to benchmark")
parser.add_argument("--dummy-size", default=1281167, type=int, help="training images with --dummy")

best_acc1 = 0


def main():
    global best_acc1
    args = parser.parse_args()
    args.distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1  # torchrun sets it
    if args.distributed:
        dist.init_process_group(backend=args.dist_backend, init_method="env://")
        args.rank, args.world_size = dist.get_rank(), dist.get_world_size()
    else:
        args.rank, args.world_size = 0, 1
    if args.seed is not None:
        torch.manual_seed(args.seed)
    use_cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)

    model = models.__dict__[args.arch](num_classes=args.num_classes).to(device)
    if args.distributed:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if use_cuda else None)
    criterion = nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=args.momentum, weight_decay=args.weight_decay)

    if args.resume:
        if os.path.isfile(args.resume):
            print(f"=> loading checkpoint '{args.resume}'")
            checkpoint = torch.load(args.resume, map_location=device)
            args.start_epoch = checkpoint["epoch"]
            best_acc1 = checkpoint["best_acc1"]
            getattr(model, "module", model).load_state_dict(checkpoint["state_dict"])
            optimizer.load_state_dict(checkpoint["optimizer"])
            print(f"=> loaded checkpoint '{args.resume}' (epoch {checkpoint['epoch']})")
        else:
            print(f"=> no checkpoint found at '{args.resume}'")

    # Data loading code
    traindir = os.path.join(args.data, "train")
    valdir = os.path.join(args.data, "val")
    normalize = transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    train_tf = transforms.Compose([transforms.RandomResizedCrop(args.image_size), transforms.RandomHorizontalFlip(),
                                   transforms.ToTensor(), normalize])
    val_tf = transforms.Compose([transforms.Resize(args.image_size * 256 // 224), transforms.CenterCrop(args.image_size),
                                 transforms.ToTensor(), normalize])
    if args.ten_crop:  # v2 runs the steps after TenCrop on each crop; collated, a list of ten batches
        val_tf = transforms_v2.Compose([
            transforms_v2.Resize(args.image_size * 256 // 224), transforms_v2.TenCrop(args.image_size),
            transforms_v2.ToImage(), transforms_v2.ToDtype(torch.float32, scale=True),
            transforms_v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])])

    if args.dummy:
        print("=> Dummy data is used!")
        val_size = max(1, round(args.dummy_size * 50000 / 1281167))
        train_dataset = datasets.FakeData(args.dummy_size, (3, 224, 224), args.num_classes, train_tf)
        val_dataset = datasets.FakeData(val_size, (3, 224, 224), args.num_classes, val_tf, random_offset=args.dummy_size)
    else:
        train_dataset = datasets.ImageFolder(traindir, train_tf)
        val_dataset = datasets.ImageFolder(valdir, val_tf)
    train_sampler = DistributedSampler(train_dataset) if args.distributed else None
    val_sampler = DistributedSampler(val_dataset, shuffle=False, drop_last=True) if args.distributed else None
    train_loader = DataLoader(train_dataset, batch_size=args.batch_size, shuffle=(train_sampler is None),
                              num_workers=args.workers, pin_memory=True, sampler=train_sampler)
    val_loader = DataLoader(val_dataset, batch_size=args.batch_size, shuffle=False,
                            num_workers=args.workers, pin_memory=True, sampler=val_sampler)

    if args.evaluate:
        validate(val_loader, model, criterion, device, args)
        return

    for epoch in range(args.start_epoch, args.epochs):
        if args.distributed:
            train_sampler.set_epoch(epoch)
        adjust_learning_rate(optimizer, epoch, args)
        train(train_loader, model, criterion, optimizer, epoch, device, args)
        acc1 = validate(val_loader, model, criterion, device, args)
        is_best = acc1 > best_acc1
        best_acc1 = max(acc1, best_acc1)
        if args.rank == 0:
            weights = getattr(model, "module", model).state_dict()  # without DDP's wrapper
            save_checkpoint({"epoch": epoch + 1, "arch": args.arch, "state_dict": weights, "best_acc1": best_acc1,
                             "optimizer": optimizer.state_dict()}, is_best, args)
    if args.distributed:
        dist.destroy_process_group()


def train(train_loader, model, criterion, optimizer, epoch, device, args):
    batch_time, data_time = AverageMeter("Time"), AverageMeter("Data")
    losses, top1, top5 = AverageMeter("Loss"), AverageMeter("Acc@1"), AverageMeter("Acc@5")
    model.train()
    end = time.time()
    for i, (images, target) in enumerate(train_loader):
        data_time.update(time.time() - end)
        images = images.to(device, non_blocking=True)
        target = target.to(device, non_blocking=True)
        output = model(images)
        loss = criterion(output, target)
        acc1, acc5 = accuracy(output, target, topk=(1, 5))
        losses.update(loss.item(), images.size(0))
        top1.update(acc1[0].item(), images.size(0))
        top5.update(acc5[0].item(), images.size(0))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        batch_time.update(time.time() - end)
        end = time.time()
        if i % args.print_freq == 0:
            print(f"Epoch: [{epoch}][{i}/{len(train_loader)}] {batch_time} {data_time} {losses} {top1} {top5}")


def validate(val_loader, model, criterion, device, args):
    batch_time, losses = AverageMeter("Time"), AverageMeter("Loss")
    top1, top5 = AverageMeter("Acc@1"), AverageMeter("Acc@5")

    def run_validate(loader, base_progress=0):
        with torch.no_grad():
            end = time.time()
            for i, (images, target) in enumerate(loader):
                i = base_progress + i
                crops = images if isinstance(images, list) else [images]  # (--ten-crop: a batch a crop)
                images = torch.cat(crops).to(device, non_blocking=True)
                target = target.to(device, non_blocking=True)
                output = model(images).view(len(crops), target.size(0), -1).mean(0)  # an image's crops averaged
                loss = criterion(output, target)
                acc1, acc5 = accuracy(output, target, topk=(1, 5))
                losses.update(loss.item(), target.size(0))
                top1.update(acc1[0].item(), target.size(0))
                top5.update(acc5[0].item(), target.size(0))
                batch_time.update(time.time() - end)
                end = time.time()
                if i % args.print_freq == 0:
                    print(f"Test: [{i}/{len(val_loader)}] {batch_time} {losses} {top1} {top5}")

    model.eval()
    run_validate(val_loader)
    if args.distributed:
        for meter in (losses, top1, top5):
            meter.all_reduce()
    if args.distributed and (len(val_loader.sampler) * args.world_size < len(val_loader.dataset)):
        # what the ranks' equal shares left out: every rank evaluates it (after the reduce)
        aux_val_dataset = Subset(val_loader.dataset,
                                 range(len(val_loader.sampler) * args.world_size, len(val_loader.dataset)))
        aux_val_loader = DataLoader(aux_val_dataset, batch_size=args.batch_size, shuffle=False,
                                    num_workers=args.workers, pin_memory=True)
        run_validate(aux_val_loader, len(val_loader))
    print(f" * Acc@1 {top1.avg:.3f} Acc@5 {top5.avg:.3f} Loss {losses.avg:.4f} ({top1.count} images)")
    return top1.avg


def save_checkpoint(state, is_best, args, filename="checkpoint.pth.tar"):
    path = os.path.join(args.checkpoint_dir, filename)
    torch.save(state, path)
    if is_best:
        shutil.copyfile(path, os.path.join(args.checkpoint_dir, "model_best.pth.tar"))


class AverageMeter:
    """Computes and stores the average and current value."""

    def __init__(self, name):
        self.name = name
        self.val = self.avg = self.sum = 0.0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count

    def all_reduce(self):
        total = torch.tensor([self.sum, self.count], dtype=torch.float64)
        dist.all_reduce(total, dist.ReduceOp.SUM)
        self.sum, self.count = total.tolist()
        self.count = int(self.count)
        self.avg = self.sum / max(self.count, 1)

    def __str__(self):
        return f"{self.name} {self.val:.3f} ({self.avg:.3f})"


def adjust_learning_rate(optimizer, epoch, args):
    """Sets the learning rate to the initial LR decayed by 10 every 30 epochs."""
    lr = args.lr * (0.1 ** (epoch // 30))
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr


def accuracy(output, target, topk=(1,)):
    """The accuracy over the k top predictions, for each k."""
    with torch.no_grad():
        maxk = min(max(topk), output.size(1))
        batch_size = target.size(0)
        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.view(1, -1).expand_as(pred))
        return [correct[:k].reshape(-1).float().sum(0, keepdim=True).mul_(100.0 / batch_size) for k in topk]


if __name__ == "__main__":
    main()
