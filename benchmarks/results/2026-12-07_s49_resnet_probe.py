"""A torchvision-layout ResNet-50 (written here; torchvision is not installed on this CPU machine)."""
import sys
import torch
from torch import nn
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))
from benchmarks.zoo_models import ResNetLoss, _images


class Bottleneck(nn.Module):
    def __init__(self, cin, width, stride, down):
        super().__init__()
        cout = width * 4
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)) if down else None

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += idt
        return self.relu(out)


class ResNet50(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64)
        self.relu, self.maxpool = nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)
        cin, layers = 64, []
        for i, (w, n) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3))):
            blocks = []
            for j in range(n):
                blocks.append(Bottleneck(cin, w, 2 if (j == 0 and i > 0) else 1, j == 0))
                cin = w * 4
            layers.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(2048, 1000)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def make():
    torch.manual_seed(0)
    model = ResNetLoss(ResNet50()).train().to(memory_format=torch.channels_last)
    images, labels = _images(128)
    return model, (images.contiguous(memory_format=torch.channels_last), labels)
